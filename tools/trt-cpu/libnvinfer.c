/*
 * Stand-in for TensorRT 11.1's full library libnvinfer.so.11, for CPU-only test
 * machines (tools/run-tests, standard flavour).
 *
 * PyPI has the real Python bindings (tensorrt-cu13-bindings) and the real lean
 * runtime (tensorrt-lean-cu13-libs: runtime, refitter, plugin registry), but the
 * full library is only on NVIDIA's own index. The bindings import nine C symbols
 * from the three full libraries. This library is linked against the real lean
 * runtime, so createInferRuntime_INTERNAL, createInferRefitter_INTERNAL and
 * getPluginRegistry resolve to the real code; it adds only the builder entry
 * points, which have no implementation here:
 *   - createInferBuilder_INTERNAL returns NULL, so trt.Builder() raises;
 *   - getBuilderPluginRegistry is the (real) plugin registry of the lean runtime.
 * Nothing else is provided or imitated.
 */
#include <stddef.h>
#include <stdint.h>

void *getPluginRegistry(void); /* libnvinfer_lean.so.11 */

void *createInferBuilder_INTERNAL(void *logger, int32_t version)
{
    (void)logger;
    (void)version;
    return NULL;
}

void *getBuilderPluginRegistry(int32_t capability)
{
    (void)capability;
    return getPluginRegistry();
}
