# type: ignore
"""Generated plugins (``custom_op`` / ``generate_plugin``) against the real QDP code.

What is real: the TensorRT 11.1 Python bindings, QDP (``tensorrt.plugin``:
registration and its signature validation, ``PluginDef.__call__``, the plugin
creator, ``_TemplateJITPlugin`` and its ``get_output_data_types``,
``get_aliased_input``, ``get_fields_to_serialize``, ``get_output_shapes`` and
``enqueue``) and TensorRT's plugin registry (``trt.get_plugin_registry()``).
What is not: there is no builder (``trt.Builder()`` raises on this machine
kind), so no network, no engine, and no CUDA device. Where TensorRT would hand
QDP objects of its own, the tests use stand-ins, each named ``StandIn*``:

- ``StandInITensor``: passes ``PluginDef.__call__``'s ``isinstance(t,
  trt.ITensor)`` check, which is all QDP does with a network tensor there;
- ``StandInDimExpr`` / ``StandInExprBuilder`` / ``StandInDimsExprs``: sympy
  expressions standing in for ``IDimensionExpr``, ``IExprBuilder`` and
  ``DimsExprs`` (the real ones need a builder: ``trt.IExprBuilder()`` crashes);
- ``standin_device_memory``: host memory standing in for CUDA buffers, so the
  real ``enqueue`` runs the generated JIT impl on the CPU.

Expected layouts come from the op schema (``PluginLayout``) and the op's fake
implementation, never from the plugin under test.
"""

import contextlib
import ctypes
import inspect
import unittest
import unittest.mock
from typing import Optional

import numpy as np
import sympy
import torch
import torch_tensorrt
from torch._subclasses.fake_tensor import FakeTensorMode
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo.conversion.plugins._plugin_layout import PluginLayout

try:
    import tensorrt.plugin as trtp
    from tensorrt.plugin import _plugin_class as qdp_plugin_class
    from tensorrt.plugin import _tensor as qdp_tensor

    import tensorrt as trt  # isort: skip

    HAVE_QDP = ENABLED_FEATURES.qdp_plugin
except ImportError:
    HAVE_QDP = False

REASON = (
    "Needs TensorRT's Python plugin module (tensorrt.plugin), which only the "
    "standard TensorRT flavour has; TensorRT-RTX has no Python plugins."
)

# QDP refuses to register a plugin id twice per process: this file's own namespace
NS = "trt_generated_qdp"


# --- the schema matrix ---------------------------------------------------------


@torch.library.custom_op(f"{NS}::one_return", mutates_args=())
def one_return(x: torch.Tensor, factor: float) -> torch.Tensor:
    return x * factor


@one_return.register_fake
def _(x, factor):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NS}::topk_pair", mutates_args=())
def topk_pair(x: torch.Tensor, k: int) -> tuple[torch.Tensor, torch.Tensor]:
    values, indices = torch.topk(x, k)
    return values, indices


@topk_pair.register_fake
def _(x, k):
    shape = (*x.shape[:-1], k)
    return x.new_empty(shape), x.new_empty(shape, dtype=torch.int64)


@torch.library.custom_op(f"{NS}::add_one_", mutates_args=("X",))
def add_one_(X: torch.Tensor) -> None:
    X.add_(1)


@add_one_.register_fake
def _(X):
    return None


@torch.library.custom_op(f"{NS}::update_and_read", mutates_args=("state",))
def update_and_read(
    state: torch.Tensor, x: torch.Tensor, *, alpha: float = 1.0
) -> torch.Tensor:
    state.add_(x, alpha=alpha)
    return state.sum(-1)


@update_and_read.register_fake
def _(state, x, *, alpha=1.0):
    return state.new_empty(state.shape[:-1])


@torch.library.custom_op(f"{NS}::two_states", mutates_args=("a", "b"))
def two_states(a: torch.Tensor, x: torch.Tensor, b: torch.Tensor) -> None:
    a.add_(x)
    b.sub_(x)


@two_states.register_fake
def _(a, x, b):
    return None


@torch.library.custom_op(f"{NS}::optional_bias", mutates_args=())
def optional_bias(x: torch.Tensor, bias: Optional[torch.Tensor]) -> torch.Tensor:
    return x if bias is None else x + bias


@optional_bias.register_fake
def _(x, bias):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NS}::kwonly_defaults", mutates_args=())
def kwonly_defaults(
    x: torch.Tensor,
    scale: float = 2.0,
    *,
    offset: int = 1,
    negate: bool = False,
) -> torch.Tensor:
    y = x * scale + offset
    return -y if negate else y


@kwonly_defaults.register_fake
def _(x, scale=2.0, *, offset=1, negate=False):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NS}::str_attr", mutates_args=())
def str_attr(x: torch.Tensor, *, mode: str = "add") -> torch.Tensor:
    return x + 1 if mode == "add" else x - 1


@str_attr.register_fake
def _(x, *, mode="add"):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NS}::attr_between", mutates_args=("y",))
def attr_between(x: torch.Tensor, a: float, y: torch.Tensor) -> None:
    y.add_(x * a)


@attr_between.register_fake
def _(x, a, y):
    return None


@torch.library.custom_op(f"{NS}::attr_first", mutates_args=())
def attr_first(a: float, x: torch.Tensor) -> torch.Tensor:
    return x * a


@attr_first.register_fake
def _(a, x):
    return torch.empty_like(x)


@torch.library.custom_op(f"{NS}::identity", mutates_args=())
def identity(x: torch.Tensor) -> torch.Tensor:
    return x.clone()


@identity.register_fake
def _(x):
    return torch.empty_like(x)


# --- schemas a generated plugin cannot take ------------------------------------


@torch.library.custom_op(f"{NS}::to_bf16", mutates_args=())
def to_bf16(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.bfloat16)


@to_bf16.register_fake
def _(x):
    return x.new_empty(x.shape, dtype=torch.bfloat16)


@torch.library.custom_op(f"{NS}::to_fp8", mutates_args=())
def to_fp8(x: torch.Tensor) -> torch.Tensor:
    return x.to(torch.float8_e4m3fn)


@to_fp8.register_fake
def _(x):
    return x.new_empty(x.shape, dtype=torch.float8_e4m3fn)


@torch.library.custom_op(f"{NS}::chunks", mutates_args=())
def chunks(x: torch.Tensor, n: int) -> list[torch.Tensor]:
    return [c.clone() for c in x.chunk(n, dim=-1)]


@chunks.register_fake
def _(x, n):
    return [c.new_empty(c.shape) for c in x.chunk(n, dim=-1)]


@torch.library.custom_op(f"{NS}::int_list_arg", mutates_args=())
def int_list_arg(x: torch.Tensor, dims: list[int]) -> torch.Tensor:
    return x.sum(dims)


@int_list_arg.register_fake
def _(x, dims):
    return x.new_empty(())


@torch.library.custom_op(f"{NS}::optional_float_arg", mutates_args=())
def optional_float_arg(x: torch.Tensor, eps: Optional[float]) -> torch.Tensor:
    return x.clone()


@optional_float_arg.register_fake
def _(x, eps):
    return torch.empty_like(x)


# name -> (input trt dtypes and shapes per tensor argument, attribute values);
# the attributes include every argument, defaults too: QDP's PluginDef.__call__
# wants them all
MATRIX = {
    "one_return": ({"x": (torch.float32, (2, 3))}, {"factor": 1.5}),
    "topk_pair": ({"x": (torch.float16, (2, 5))}, {"k": 3}),
    "add_one_": ({"X": (torch.int32, (4,))}, {}),
    "update_and_read": (
        {"state": (torch.float32, (2, 3)), "x": (torch.float32, (2, 3))},
        {"alpha": 0.5},
    ),
    "two_states": (
        {
            "a": (torch.int8, (3,)),
            "x": (torch.int8, (3,)),
            "b": (torch.int8, (3,)),
        },
        {},
    ),
    "optional_bias": (
        {"x": (torch.float32, (2, 3)), "bias": (torch.float32, (2, 3))},
        {},
    ),
    "kwonly_defaults": (
        {"x": (torch.float32, (2, 2))},
        {"scale": 3.0, "offset": 2, "negate": True},
    ),
    "attr_between": (
        {"x": (torch.float16, (3,)), "y": (torch.float16, (3,))},
        {"a": 2.0},
    ),
    "attr_first": ({"x": (torch.float32, (2, 2))}, {"a": -1.0}),
    "identity": ({"x": (torch.bool, (5,))}, {}),
}

_GENERATED = set()


def generated(name, ns=NS):
    """Generate the plugin for ns::name once per process (QDP forbids twice)."""
    if f"{ns}::{name}" not in _GENERATED:
        torch_tensorrt.dynamo.conversion.plugins.generate_plugin(f"{ns}::{name}")
        _GENERATED.add(f"{ns}::{name}")
    return getattr(getattr(trtp.op, ns), name)


def op_of(name):
    return getattr(getattr(torch.ops, NS), name).default


def trt_dtype(torch_dtype):
    return torch_tensorrt.dtype._from(torch_dtype).to(trt.DataType)


def qdp_attr_value(schema_type, value):
    """An attribute as a QDP caller passes it, from the argument's schema type."""
    if isinstance(schema_type, torch.StringType):
        return value
    np_dtype = {
        torch.FloatType: np.float64,
        torch.IntType: np.int64,
        torch.BoolType: np.bool_,
    }[type(schema_type)]
    return np.array([value], dtype=np_dtype)


def field_value(field):
    return np.asarray(field.data).reshape(-1)[0].item()


def expected_output_dtypes(name):
    """Per plugin output, the dtype the op's fake implementation gives it."""
    op = op_of(name)
    layout = PluginLayout.from_op(op)
    tensors, attrs = MATRIX[name]
    with FakeTensorMode():
        fakes = {n: torch.empty(s, dtype=d) for n, (d, s) in tensors.items()}
        args, kwargs = [], {}
        for arg in op._schema.arguments:
            value = fakes[arg.name] if arg.name in fakes else attrs[arg.name]
            if arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args.append(value)
        result = op(*args, **kwargs)
    returns = {0: [], 1: [result]}.get(len(layout.returns), result)
    return [r.dtype for r in returns] + [fakes[m].dtype for m in layout.mutated]


class StandInITensor(trt.ITensor if HAVE_QDP else object):
    """Passes ``isinstance(t, trt.ITensor)``; never given to TensorRT."""


def standin_itensor():
    # pybind11 objects made without __init__: no TensorRT object behind them
    return StandInITensor.__new__(StandInITensor)


def build_plugin(name, qpcr=None):
    """A BUILD-phase plugin through QDP's own PluginDef.__call__ and the registry."""
    plugin_def = generated(name)
    op = op_of(name)
    tensors, attrs = MATRIX[name]
    types = {a.name: a.type for a in op._schema.arguments}
    make = plugin_def(
        *[standin_itensor() for _ in tensors],
        **{k: qdp_attr_value(types[k], v) for k, v in attrs.items()},
    )
    _, _, plugin = make(qpcr)
    return plugin


def runtime_plugin(name, build, ns=NS):
    """A RUNTIME-phase plugin from the BUILD plugin's serialized fields."""
    creator = trt.get_plugin_registry().get_creator(name, "1", ns)
    assert creator is not None, f"{ns}::{name} is not in TensorRT's plugin registry"
    return creator.create_plugin(
        name, ns, build.get_fields_to_serialize(), trt.TensorRTPhase.RUNTIME
    )


@unittest.skipIf(not HAVE_QDP, REASON)
class TestGeneratedPluginSignatures(TestCase):
    def test_register_and_impl_signatures_are_tensors_first(self):
        lines = []
        for name in MATRIX:
            plugin_def = generated(name)
            lines.append(f"{op_of(name)._schema}")
            lines.append(
                f"  register({', '.join(inspect.signature(plugin_def.register_func).parameters)})"
            )
            lines.append(
                f"  impl({', '.join(inspect.signature(plugin_def.impl_func).parameters)})"
            )
        self.assertExpectedInline(
            "\n".join(lines),
            """\
trt_generated_qdp::one_return(Tensor x, float factor) -> Tensor
  register(x, factor)
  impl(x, factor, outputs, stream)
trt_generated_qdp::topk_pair(Tensor x, SymInt k) -> (Tensor, Tensor)
  register(x, k)
  impl(x, k, outputs, stream)
trt_generated_qdp::add_one_(Tensor(a0!) X) -> ()
  register(X)
  impl(X, outputs, stream)
trt_generated_qdp::update_and_read(Tensor(a0!) state, Tensor x, *, float alpha=1.) -> Tensor
  register(state, x, alpha)
  impl(state, x, alpha, outputs, stream)
trt_generated_qdp::two_states(Tensor(a0!) a, Tensor x, Tensor(a2!) b) -> ()
  register(a, x, b)
  impl(a, x, b, outputs, stream)
trt_generated_qdp::optional_bias(Tensor x, Tensor? bias) -> Tensor
  register(x, bias)
  impl(x, bias, outputs, stream)
trt_generated_qdp::kwonly_defaults(Tensor x, float scale=2., *, SymInt offset=1, bool negate=False) -> Tensor
  register(x, scale, offset, negate)
  impl(x, scale, offset, negate, outputs, stream)
trt_generated_qdp::attr_between(Tensor x, float a, Tensor(a2!) y) -> ()
  register(x, y, a)
  impl(x, y, a, outputs, stream)
trt_generated_qdp::attr_first(float a, Tensor x) -> Tensor
  register(x, a)
  impl(x, a, outputs, stream)
trt_generated_qdp::identity(Tensor x) -> Tensor
  register(x)
  impl(x, outputs, stream)""",
        )

    def test_inputs_and_attributes_follow_the_schema(self):
        for name in MATRIX:
            with self.subTest(name):
                plugin_def = generated(name)
                layout = PluginLayout.from_op(op_of(name))
                self.assertEqual(
                    plugin_def.input_tensor_names, list(layout.tensor_args)
                )
                self.assertEqual(list(plugin_def.input_attrs), list(layout.attr_args))
                self.assertEqual(
                    plugin_def.num_outputs,
                    len(layout.outputs([1] * len(layout.returns))),
                )

    def test_str_attributes_in_the_build_phase(self):
        # BUILD phase only: QDP 11.1's get_fields_to_serialize builds a str field
        # from a temporary bytes object that the field collection does not keep
        # alive, so the RUNTIME phase reads freed memory (not ours to fix here)
        plugin_def = generated("str_attr")
        self.assertEqual(list(plugin_def.input_attrs), ["mode"])
        _, _, plugin = plugin_def(standin_itensor(), mode="sub")(None)
        self.assertEqual(plugin.attrs, {"mode": "sub"})
        self.assertEqual(
            plugin.get_output_data_types([trt.DataType.HALF], [2]), [trt.DataType.HALF]
        )
        x = torch.arange(4, dtype=torch.float16)
        out = torch.zeros_like(x)
        with cpu_enqueue():
            plugin.enqueue(
                [tensor_desc(x)],
                [tensor_desc(out)],
                [x.data_ptr()],
                [out.data_ptr()],
                [x.stride()],
                [out.stride()],
                0,
            )
        self.assertEqual(out, str_attr(x, mode="sub"))

    def test_tensor_list_returns_are_a_clear_error(self):
        with self.assertRaisesRegex(ValueError, f"{NS}::chunks.*Tensor\\[\\]"):
            generated("chunks")

    def test_unsupported_argument_types_are_named(self):
        for name, arg in (("int_list_arg", "dims"), ("optional_float_arg", "eps")):
            with self.subTest(name):
                (type_,) = [
                    a.type for a in op_of(name)._schema.arguments if a.name == arg
                ]
                with self.assertRaises(ValueError) as error:
                    generated(name)
                message = str(error.exception)
                self.assertIn(f"{NS}::{name}", message)
                self.assertIn(f"'{arg}'", message)
                self.assertIn(str(type_), message)


@unittest.skipIf(not HAVE_QDP, REASON)
class TestGeneratedPluginsInTheRegistry(TestCase):
    def check_plugin(self, name, plugin, runtime_first=False):
        layout = PluginLayout.from_op(op_of(name))
        tensors, attrs = MATRIX[name]
        outputs = layout.outputs([1] * len(layout.returns))
        self.assertEqual(plugin.get_num_outputs(), len(outputs))
        if runtime_first:
            # QDP 11.1 defect 3: the alias map is filled by get_output_data_types only
            self.assertEqual(plugin.aliased_map, {})
            with self.assertRaises(KeyError):
                plugin.get_aliased_input(0)
        input_types = [trt_dtype(d) for d, _ in tensors.values()]
        ranks = [len(s) for _, s in tensors.values()]
        self.assertEqual(
            plugin.get_output_data_types(input_types, ranks),
            [trt_dtype(d) for d in expected_output_dtypes(name)],
        )
        self.assertEqual(
            [plugin.get_aliased_input(i) for i in range(len(outputs))],
            [
                -1 if alias is None else layout.tensor_args.index(alias)
                for _, alias in outputs
            ],
        )
        fields = {f.name: field_value(f) for f in plugin.get_fields_to_serialize()}
        self.assertEqual(fields, attrs)

    def test_build_phase_through_plugin_def(self):
        for name in MATRIX:
            for qpcr in (
                None,
                trt.QuickPluginCreationRequest.PREFER_JIT,
                trt.QuickPluginCreationRequest.STRICT_JIT,
            ):
                with self.subTest(name=name, qpcr=qpcr):
                    self.check_plugin(name, build_plugin(name, qpcr))

    def test_runtime_phase_from_serialized_fields(self):
        for name in MATRIX:
            with self.subTest(name):
                build = build_plugin(name)
                build.get_output_data_types(
                    [trt_dtype(d) for d, _ in MATRIX[name][0].values()],
                    [len(s) for _, s in MATRIX[name][0].values()],
                )
                self.check_plugin(name, runtime_plugin(name, build), runtime_first=True)


class StandInDimExpr(trt.IDimensionExpr if HAVE_QDP else object):
    """A sympy expression standing in for ``trt.IDimensionExpr``."""

    def is_constant(self):
        return self.sym.is_number

    def get_constant_value(self):
        return int(self.sym)


def standin_dim(expr):
    # Passes QDP's isinstance(value, trt.IDimensionExpr); never given to TensorRT
    dim = StandInDimExpr.__new__(StandInDimExpr)
    dim.sym = sympy.sympify(expr)
    return dim


class StandInExprBuilder:
    """Stands in for ``trt.IExprBuilder`` (constant and operation only)."""

    def constant(self, value):
        return standin_dim(value)

    def operation(self, op, a, b):
        ops = {
            trt.DimensionOperation.SUM: lambda x, y: x + y,
            trt.DimensionOperation.SUB: lambda x, y: x - y,
            trt.DimensionOperation.PROD: lambda x, y: x * y,
            trt.DimensionOperation.FLOOR_DIV: lambda x, y: sympy.floor(x / y),
            trt.DimensionOperation.CEIL_DIV: lambda x, y: sympy.ceiling(x / y),
            trt.DimensionOperation.MAX: sympy.Max,
            trt.DimensionOperation.MIN: sympy.Min,
        }
        return standin_dim(ops[op](a.sym, b.sym))


class StandInDimsExprs(list):
    """Stands in for ``trt.DimsExprs`` (a C++ array that only takes real expressions)."""

    def __init__(self, n):
        super().__init__([None] * n)


@unittest.skipIf(not HAVE_QDP, REASON)
class TestGeneratedPluginShapes(TestCase):
    def test_output_shapes_follow_the_fake_implementation(self):
        for name in MATRIX:
            with self.subTest(name):
                tensors, attrs = MATRIX[name]
                plugin = build_plugin(name)
                plugin.get_output_data_types(
                    [trt_dtype(d) for d, _ in tensors.values()],
                    [len(s) for _, s in tensors.values()],
                )
                symbols = [
                    [sympy.Symbol(f"{arg}_{i}") for i in range(len(shape))]
                    for arg, (_, shape) in tensors.items()
                ]
                inputs = [[standin_dim(s) for s in dims] for dims in symbols]
                try:
                    with unittest.mock.patch.object(
                        qdp_plugin_class.trt, "DimsExprs", StandInDimsExprs
                    ):
                        exprs = plugin.get_output_shapes(
                            inputs, [], StandInExprBuilder()
                        )
                finally:
                    qdp_tensor.SymIntExpr._exprBuilder = None
                sizes = {
                    sym: size
                    for dims, (_, (_, shape)) in zip(symbols, tensors.items())
                    for sym, size in zip(dims, shape)
                }
                got = [tuple(int(e.sym.subs(sizes)) for e in out) for out in exprs]
                self.assertEqual(got, self.eager_output_shapes(name))

    def eager_output_shapes(self, name):
        op = op_of(name)
        layout = PluginLayout.from_op(op)
        tensors, attrs = MATRIX[name]
        with FakeTensorMode():
            fakes = {n: torch.empty(s, dtype=d) for n, (d, s) in tensors.items()}
            args, kwargs = [], {}
            for arg in op._schema.arguments:
                value = fakes[arg.name] if arg.name in fakes else attrs[arg.name]
                (
                    kwargs.__setitem__(arg.name, value)
                    if arg.kwarg_only
                    else args.append(value)
                )
            result = op(*args, **kwargs)
        returns = {0: [], 1: [result]}.get(len(layout.returns), result)
        return [tuple(r.shape) for r in returns] + [
            tuple(fakes[m].shape) for m in layout.mutated
        ]


def standin_device_memory(obj, *args, **kwargs):
    """``torch.as_tensor`` for QDP tensors: a CPU view of the host memory they point to."""
    cai = obj.__cuda_array_interface__
    np_dtype = np.dtype(cai["typestr"])
    nbytes = np_dtype.itemsize + sum(
        (n - 1) * s for n, s in zip(cai["shape"], cai["strides"])
    )
    buffer = (ctypes.c_byte * nbytes).from_address(cai["data"][0])
    return torch.from_numpy(
        np.ndarray(cai["shape"], np_dtype, buffer=buffer, strides=cai["strides"])
    )


@contextlib.contextmanager
def cpu_enqueue():
    as_tensor = torch.as_tensor

    def patched(obj, *args, **kwargs):
        if isinstance(obj, trtp.Tensor):
            return standin_device_memory(obj)
        return as_tensor(obj, *args, **kwargs)

    with unittest.mock.patch("torch.as_tensor", patched), unittest.mock.patch(
        "torch.cuda.ExternalStream", lambda stream: stream
    ), unittest.mock.patch(
        "torch.cuda.stream", lambda stream: contextlib.nullcontext()
    ):
        yield


def tensor_desc(t):
    desc = trt.PluginTensorDesc()
    desc.dims = tuple(t.shape)
    desc.type = trt_dtype(t.dtype)
    desc.format = trt.TensorFormat.LINEAR
    desc.scale = 1.0
    return desc


@unittest.skipIf(not HAVE_QDP, REASON)
class TestGeneratedJitImplOnHostMemory(TestCase):
    """The real QDP ``enqueue`` with host memory standing in for CUDA buffers."""

    def sample_inputs(self, name):
        tensors, _ = MATRIX[name]
        torch.manual_seed(0)
        out = {}
        for arg, (dtype, shape) in tensors.items():
            if dtype == torch.bool:
                out[arg] = torch.rand(shape) > 0.5
            elif dtype.is_floating_point:
                out[arg] = torch.randn(shape).to(dtype)
            else:
                out[arg] = torch.randint(-5, 5, shape, dtype=dtype)
        return out

    def eager(self, name, inputs):
        """The op on copies, in schema order: (returns, new values of mutated args)."""
        op = op_of(name)
        layout = PluginLayout.from_op(op)
        _, attrs = MATRIX[name]
        copies = {k: v.clone() for k, v in inputs.items()}
        args, kwargs = [], {}
        for arg in op._schema.arguments:
            value = copies[arg.name] if arg.name in copies else attrs[arg.name]
            if arg.kwarg_only:
                kwargs[arg.name] = value
            else:
                args.append(value)
        result = op(*args, **kwargs)
        returns = {0: [], 1: [result]}.get(len(layout.returns), result)
        return list(returns), [copies[m] for m in layout.mutated]

    def run_enqueue(self, name, plugin):
        layout = PluginLayout.from_op(op_of(name))
        inputs = self.sample_inputs(name)
        expected_returns, expected_new = self.eager(name, inputs)
        ins = [inputs[a] for a in layout.tensor_args]
        # aliased outputs are bound to their input's memory, as TensorRT does
        outs = [torch.zeros_like(r) for r in expected_returns] + [
            inputs[m] for m in layout.mutated
        ]
        with cpu_enqueue():
            plugin.enqueue(
                [tensor_desc(t) for t in ins],
                [tensor_desc(t) for t in outs],
                [t.data_ptr() for t in ins],
                [t.data_ptr() for t in outs],
                [t.stride() for t in ins],
                [t.stride() for t in outs],
                0,
            )
        for got, want in zip(outs, expected_returns + expected_new):
            self.assertEqual(got, want)

    def test_runtime_phase_plugin_computes_the_op_in_place(self):
        # RUNTIME phase, before get_output_data_types: QDP's alias map is empty
        # (defect 3), so nothing may depend on Tensor.is_aliased / get_aliased()
        for name in MATRIX:
            with self.subTest(name):
                build = build_plugin(name)
                build.get_output_data_types(
                    [trt_dtype(d) for d, _ in MATRIX[name][0].values()],
                    [len(s) for _, s in MATRIX[name][0].values()],
                )
                plugin = runtime_plugin(name, build)
                self.assertEqual(plugin.aliased_map, {})
                self.run_enqueue(name, plugin)

    def test_build_phase_plugin_computes_the_op_in_place(self):
        # After get_output_data_types QDP links every non-aliased output to the
        # last input (defect 2); the impl must not care
        for name in MATRIX:
            with self.subTest(name):
                plugin = build_plugin(name)
                plugin.get_output_data_types(
                    [trt_dtype(d) for d, _ in MATRIX[name][0].values()],
                    [len(s) for _, s in MATRIX[name][0].values()],
                )
                self.run_enqueue(name, plugin)


@unittest.skipIf(not HAVE_QDP, REASON)
class TestGeneratedPluginDtypes(TestCase):
    def test_input_dtypes_follow_what_the_cuda_array_interface_takes(self):
        # Oracle: QDP's own Tensor.__cuda_array_interface__ for each TensorRT dtype
        plugin = build_plugin("identity")
        for name, dtype in trt.DataType.__members__.items():
            with self.subTest(name):
                tensor = trtp.Tensor()
                tensor.dtype = dtype
                tensor.shape = (1,)
                tensor.strides = (1,)
                tensor.data_ptr = 0
                try:
                    tensor.__cuda_array_interface__
                    handled = True
                except (TypeError, ValueError):
                    handled = False
                if handled:
                    self.assertEqual(
                        plugin.get_output_data_types([dtype], [1]), [dtype]
                    )
                else:
                    with self.assertRaises(ValueError) as error:
                        plugin.get_output_data_types([dtype], [1])
                    message = str(error.exception)
                    self.assertIn(f"{NS}::identity", message)
                    self.assertIn("'x'", message)
                    self.assertIn(str(dtype), message)
                    self.assertIn(str(trt.DataType.FLOAT), message)

    def test_unsupported_output_dtypes_are_an_error_before_enqueue(self):
        for name, dtype in (
            ("to_bf16", trt.DataType.BF16),
            ("to_fp8", trt.DataType.FP8),
        ):
            with self.subTest(name):
                plugin_def = generated(name)
                _, _, plugin = plugin_def(standin_itensor())()
                with self.assertRaises(ValueError) as error:
                    plugin.get_output_data_types([trt.DataType.FLOAT], [2])
                message = str(error.exception)
                self.assertIn(f"{NS}::{name}", message)
                self.assertIn("return 0", message)
                self.assertIn(str(dtype), message)


if __name__ == "__main__":
    run_tests()
