"""The benchmark's plugins (tools/bench/state_update.py) against the real QDP.

Registers the benchmark's in-place op, its QDP plugin (an ahead-of-time Triton
kernel) and converter, and checks what the real ``tensorrt.plugin`` reads from
them: the plugin's output aliases the state. The kernels compile and run only when
TensorRT's builder calls ``aot_impl`` on a GPU, which cannot happen here.
"""

import importlib.util
import os

import pytest

if os.environ.get("TORCHTRT_PATCHSET_ENV") != "standard":
    pytest.skip(
        "Needs the real tensorrt.plugin of the standard-flavour environment "
        "(TORCHTRT_PATCHSET_ENV=standard); this is another environment.",
        allow_module_level=True,
    )

import torch

SCRIPT = os.path.join(
    os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
    "tools",
    "bench",
    "state_update.py",
)


@pytest.fixture(scope="module")
def bench():
    spec = importlib.util.spec_from_file_location("bench_state_update", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.define_ops("aot")
    return module


def _descs(qualname, shapes):
    import tensorrt.plugin as trtp
    from torch_tensorrt.dynamo.conversion.plugins._plugin_call import (
        qdp_output_descs,
    )

    import tensorrt as trt

    class Input:
        def __init__(self, dtype, shape):
            self.dtype, self.shape = dtype, shape

    plugin_def = trtp._lib.QDP_REGISTRY[qualname]
    inputs = [Input(dtype, shape) for dtype, shape in shapes]
    assert plugin_def.input_tensor_names == ["state", "index", "update"]
    assert plugin_def.aot_impl_func is not None
    return qdp_output_descs(plugin_def, inputs, {}), trt


def test_the_plugin_declares_its_alias(bench):
    qualname = "bench_state::scatter_add_"
    import tensorrt as trt

    shapes = [(trt.float32, (256, 1024)), (trt.int64, (1,)), (trt.float32, (1, 1024))]
    descs, trt = _descs(qualname, shapes)
    assert descs == [(trt.float32, 0)]
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import DYNAMO_CONVERTERS

    namespace, name = qualname.split("::")
    op = getattr(getattr(torch.ops, namespace), name).default
    assert op in DYNAMO_CONVERTERS


def test_the_kernel_compiles_to_ptx_without_a_gpu(bench):
    """What the AOT plugins hand TensorRT, compiled for a GPU target on the CPU.

    Triton 3.8 appends two scratch-pointer parameters to every kernel, after the
    ones QDP passes (inputs, outputs, extra arguments); this kernel needs no
    scratch memory and never reads them. Whether TensorRT's launch of such a
    kernel is sound has not been checked on a GPU (README, "not verified").
    """
    import triton
    from triton.backends.compiler import GPUTarget

    src = triton.compiler.ASTSource(
        fn=bench._kernel(),
        signature={
            "state_ptr": "*fp32",
            "index_ptr": "*i64",
            "update_ptr": "*fp32",
            "out_ptr": "*fp32",
            "n_rows": "i32",
        },
        constexprs={"ROW": bench.ROW},
    )
    compiled = triton.compile(src, target=GPUTarget("cuda", 89, 32))
    ptx = compiled.asm["ptx"]
    assert compiled.metadata.name == "scatter_add_rows"
    params = [line for line in ptx.splitlines() if "scatter_add_rows_param_" in line]
    declared = [p for p in params if p.strip().startswith(".param")]
    assert len(declared) == 7  # 5 of ours, 2 scratch pointers
    assert "scatter_add_rows_param_5]" not in ptx
    assert "scatter_add_rows_param_6]" not in ptx
    assert compiled.metadata.shared == 0
