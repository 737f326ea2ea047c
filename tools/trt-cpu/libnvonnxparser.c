/*
 * Stand-in for TensorRT 11.1's libnvonnxparser.so.11 on CPU-only test machines
 * (see libnvinfer.c). There is no ONNX parser here: the factories return NULL,
 * so trt.OnnxParser(...) raises, and the version is 0.
 */
#include <stddef.h>

void *createNvOnnxParser_INTERNAL(void *network, void *logger, int version)
{
    (void)network;
    (void)logger;
    (void)version;
    return NULL;
}

void *createNvOnnxParserRefitter_INTERNAL(void *refitter, void *logger, int version)
{
    (void)refitter;
    (void)logger;
    (void)version;
    return NULL;
}

int getNvOnnxParserVersion(void) { return 0; }
