/*
 * Stand-in for TensorRT 11.1's libnvinfer_plugin.so.11 on CPU-only test machines
 * (see libnvinfer.c). TensorRT's bundled plugins are not available here:
 * initLibNvInferPlugins registers nothing and says so by returning false.
 */
#include <stdbool.h>

bool initLibNvInferPlugins(void *logger, const char *plugin_namespace)
{
    (void)logger;
    (void)plugin_namespace;
    return false;
}
