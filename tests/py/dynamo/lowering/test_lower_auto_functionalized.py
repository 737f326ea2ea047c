# type: ignore
"""Mutating ops (``mutates_args``, ``Tensor(a!)``) through lowering and conversion.

The ops are custom ops defined here with CPU kernels, fake kernels and
converters built from standard TensorRT layers that follow the converter
convention for mutating ops (the op's returns, then the new value of each
mutated argument). Graph snapshots use expecttest (``EXPECTTEST_ACCEPT=1``
rewrites them).
"""

import copy
import operator
import unittest
import unittest.mock
from typing import List

import torch
import torch_tensorrt
from torch.testing._internal.common_utils import TestCase, run_tests
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo._SourceIR import SourceIR
from torch_tensorrt.dynamo.conversion import dynamo_tensorrt_converter, impl
from torch_tensorrt.dynamo.conversion._functionalized_op import FunctionalizedOp
from torch_tensorrt.dynamo.lowering import post_lowering
from torch_tensorrt.dynamo.lowering.passes.lower_auto_functionalized import (
    lower_auto_functionalized,
)

NO_CUDA = not torch.cuda.is_available()
CPU_BUILDER = NO_CUDA and ENABLED_FEATURES.tensorrt_rtx
NEEDS_CPU_BUILDER = (
    "Building engines without a CUDA device needs TensorRT-RTX on a host "
    "without a GPU; the GPU variant of these checks is TestMutationsOnGpu."
)


# ----------------------------------------------------------------------------
# Ops under test


@torch.library.custom_op("trt_mut::add_one_", mutates_args=("x",))
def add_one_(x: torch.Tensor) -> None:
    x.add_(1)


@add_one_.register_fake
def _(x):
    return None


@torch.library.custom_op("trt_mut::add_one_ret", mutates_args=("x",))
def add_one_ret(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    x.add_(1)
    return x * y


@add_one_ret.register_fake
def _(x, y):
    return torch.empty_like(x)


@torch.library.custom_op("trt_mut::add_two_", mutates_args=("x", "z"))
def add_two_(x: torch.Tensor, z: torch.Tensor, alpha: float = 2.0) -> None:
    x.add_(1)
    z.add_(alpha)


@add_two_.register_fake
def _(x, z, alpha=2.0):
    return None


@torch.library.custom_op("trt_mut::no_converter_", mutates_args=("x",))
def no_converter_(x: torch.Tensor) -> None:
    x.mul_(3)


@no_converter_.register_fake
def _(x):
    return None


def _add(ctx, target, name, x, value):
    return impl.elementwise.add(ctx, target, SourceIR.ATEN, name, x, value)


@dynamo_tensorrt_converter(
    torch.ops.trt_mut.add_one_.default, supports_dynamic_shapes=True
)
def convert_add_one_(ctx, target, args, kwargs, name):
    # a bare ITensor: the new value of x, the only output
    return _add(ctx, target, name, args[0], 1.0)


@dynamo_tensorrt_converter(
    torch.ops.trt_mut.add_one_ret.default, supports_dynamic_shapes=True
)
def convert_add_one_ret(ctx, target, args, kwargs, name):
    x, y = args
    new_x = _add(ctx, target, f"{name}_x", x, 1.0)
    out = impl.elementwise.mul(ctx, target, SourceIR.ATEN, f"{name}_out", new_x, y)
    return out, new_x


@dynamo_tensorrt_converter(
    torch.ops.trt_mut.add_two_.default, supports_dynamic_shapes=True
)
def convert_add_two_(ctx, target, args, kwargs, name):
    x, z = args[:2]
    alpha = args[2] if len(args) > 2 else kwargs.get("alpha", 2.0)
    return (
        _add(ctx, target, f"{name}_x", x, 1.0),
        _add(ctx, target, f"{name}_z", z, alpha),
    )


@torch.library.custom_op("trt_mut::add_all_", mutates_args=("xs",))
def add_all_(xs: List[torch.Tensor], d: torch.Tensor) -> None:
    for x in xs:
        x.add_(d)


@add_all_.register_fake
def _(xs, d):
    return None


@dynamo_tensorrt_converter(torch.ops.trt_mut.add_all_.default)
def convert_add_all_(ctx, target, args, kwargs, name):
    xs, d = args[:2]
    return tuple(
        impl.elementwise.add(ctx, target, SourceIR.ATEN, f"{name}_{i}", x, d)
        for i, x in enumerate(xs)
    )


class AddAll(torch.nn.Module):
    """A mutated ``Tensor(a!)[]`` whose op has a converter."""

    def forward(self, a, b, d):
        torch.ops.trt_mut.add_all_([a, b], d)
        return d * 2


# ----------------------------------------------------------------------------
# The pattern matrix


class InplaceAtenNotReturned(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x + 1


class InplaceAtenReturned(torch.nn.Module):
    def forward(self, x):
        x.mul_(2)
        return x


class MutateInputNotReturned(torch.nn.Module):
    def forward(self, x, y):
        torch.ops.trt_mut.add_one_(x)
        return y * 2


class MutateInputReturned(torch.nn.Module):
    def forward(self, x):
        torch.ops.trt_mut.add_one_(x)
        return x


class MutateInputReturnNothing(torch.nn.Module):
    def forward(self, x):
        torch.ops.trt_mut.add_one_(x)


class AddInPlaceReturnNothing(torch.nn.Module):
    """An in-place ATen op and no return (the first GPU run of issue #4240's case)."""

    def forward(self, x, d):
        x.add_(d)


class MutateAndReturn(torch.nn.Module):
    def forward(self, x, y):
        out = torch.ops.trt_mut.add_one_ret(x, y)
        return out + x


class TwoMutatedArgs(torch.nn.Module):
    def forward(self, x, z):
        torch.ops.trt_mut.add_two_(x, z)
        return x * z


class NoConverter(torch.nn.Module):
    def forward(self, x):
        torch.ops.trt_mut.no_converter_(x)
        return x + 1


class StateModule(torch.nn.Module):
    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(4, 16))


class MutateBuffer(StateModule):
    def forward(self, x):
        torch.ops.trt_mut.add_one_(self.state)
        return x + self.state


class MutateBufferSlice(StateModule):
    def forward(self, x):
        torch.ops.trt_mut.add_one_(self.state[:, :8])
        return x + self.state


class MutateTwoSlicesOfOneBuffer(StateModule):
    def forward(self, x):
        torch.ops.trt_mut.add_two_(self.state[:, :8], self.state[:, 8:])
        return x + self.state


class ReturnMutatedBuffer(StateModule):
    def forward(self, x):
        torch.ops.trt_mut.add_one_(self.state)
        return self.state


class MutateBufferWithOtherOutputs(StateModule):
    def forward(self, x):
        torch.ops.trt_mut.add_one_(self.state)
        return x * 2, self.state + 1


class MutateBufferAndReturn(StateModule):
    def forward(self, x):
        return torch.ops.trt_mut.add_one_ret(self.state, x)


class MutateRowState(torch.nn.Module):
    """State without a batch dimension, for dynamic batch sizes."""

    def __init__(self):
        super().__init__()
        self.register_buffer("state", torch.zeros(16))

    def forward(self, x):
        torch.ops.trt_mut.add_one_(self.state)
        return x + self.state


BUFFER_CASES = [
    ("mutate_buffer", MutateBuffer),
    ("mutate_buffer_slice", MutateBufferSlice),
    ("mutate_two_slices_of_one_buffer", MutateTwoSlicesOfOneBuffer),
    ("return_mutated_buffer", ReturnMutatedBuffer),
    ("mutate_buffer_with_other_outputs", MutateBufferWithOtherOutputs),
    ("mutate_buffer_and_return", MutateBufferAndReturn),
]


class MutateTransposedState(StateModule):
    def forward(self, x):
        torch.ops.trt_mut.add_one_(self.state.t()[:4])
        return x + self.state


class MutateOverlappingViews(StateModule):
    def forward(self, x):
        torch.ops.trt_mut.add_two_(self.state[:, :8], self.state[:, 4:])
        return x + self.state


USER_INPUT_CASES = [
    ("inplace_aten_not_returned", InplaceAtenNotReturned, 1),
    ("inplace_aten_returned", InplaceAtenReturned, 1),
    ("mutate_input_not_returned", MutateInputNotReturned, 2),
    ("mutate_input_returned", MutateInputReturned, 1),
    ("mutate_input_return_nothing", MutateInputReturnNothing, 1),
    ("add_in_place_return_nothing", AddInPlaceReturnNothing, 2),
    ("mutate_and_return", MutateAndReturn, 2),
    ("two_mutated_args", TwoMutatedArgs, 2),
    ("no_converter", NoConverter, 1),
]


def _inputs(n, dtype=torch.float32, batch=4):
    torch.manual_seed(0)
    return tuple(torch.randn(batch, 16, dtype=dtype) for _ in range(n))


def _clone(args):
    return tuple(a.clone() for a in args)


def _dryrun(module, args, **kwargs):
    """``compile(dryrun=True)``: partitioned, nothing built; runs on the CPU."""
    ep = torch.export.export(copy.deepcopy(module), _clone(args))
    return torch_tensorrt.dynamo.compile(
        ep,
        arg_inputs=list(_clone(args)),
        dryrun=True,
        min_block_size=1,
        **kwargs,
    )


def _dryrun_dynamic(module, n):
    """``compile(dryrun=True)`` of ``module`` on ``n`` inputs of batch 1 to 8."""
    batch = torch.export.Dim("batch", min=1, max=8)
    args = _inputs(n, batch=4)
    shapes = tuple({0: batch} for _ in range(n))
    ep = torch.export.export(module, _clone(args), dynamic_shapes=shapes)
    inputs = [
        torch_tensorrt.Input(min_shape=(1, 16), opt_shape=(4, 16), max_shape=(8, 16))
        for _ in range(n)
    ]
    return torch_tensorrt.dynamo.compile(
        ep, arg_inputs=inputs, dryrun=True, min_block_size=1
    )


def _build_engine(module, args, **kwargs):
    """The serialized engine, and the graph and interpreter result it was built from."""
    from torch_tensorrt.dynamo import _compiler

    results = []
    real = _compiler.interpret_module_to_result

    def spy(gm, *a, **kw):
        results.append((gm, real(gm, *a, **kw)))
        return results[-1][1]

    ep = torch.export.export(copy.deepcopy(module), _clone(args))
    with unittest.mock.patch.object(_compiler, "interpret_module_to_result", spy):
        engine = _compiler.convert_exported_program_to_serialized_trt_engine(
            ep, arg_inputs=list(args), **kwargs
        )
    assert isinstance(engine, bytes)
    ((gm, result),) = results
    return engine, gm, result


def _lowered(module, args, **settings):
    ep = torch.export.export(copy.deepcopy(module), _clone(args))
    gm = ep.run_decompositions().module()
    return post_lowering(gm, CompilationSettings(**settings))


def _only_this_pass(module, args):
    """The decomposed graph after lower_auto_functionalized alone (no folding)."""
    gm = torch.export.export(module, _clone(args)).run_decompositions().module()
    return lower_auto_functionalized(gm, CompilationSettings())


def _graph(gm):
    """The lowered graph, one node per line, without metadata noise."""
    lines = []
    for node in gm.graph.nodes:
        if node.op == "output":
            lines.append(f"return {node.args[0]}")
            continue
        target = node.target
        if isinstance(target, FunctionalizedOp):
            target = repr(target)
        elif node.op == "call_function":
            target = getattr(target, "__name__", str(target))
            if node.target is operator.getitem:
                target = "getitem"
            else:
                target = str(node.target)
        args = ", ".join(str(a) for a in node.args)
        kwargs = "".join(f", {k}={v}" for k, v in node.kwargs.items())
        lines.append(f"{node.name} = {node.op}[{target}]({args}{kwargs})")
    return "\n".join(lines)


class TestFunctionalizedOp(TestCase):
    def test_layout_and_functional_semantics(self):
        fop = FunctionalizedOp(torch.ops.trt_mut.add_one_ret.default)
        self.assertIs(fop, FunctionalizedOp(torch.ops.trt_mut.add_one_ret.default))
        self.assertEqual((fop.mutated, fop.num_outputs), (("x",), 2))
        x, y = torch.ones(3), torch.full((3,), 2.0)
        out, new_x = fop(x, y)
        self.assertEqual(x, torch.ones(3), msg="the functional form mutated its input")
        self.assertEqual(new_x, torch.full((3,), 2.0))
        self.assertEqual(out, torch.full((3,), 4.0))

    def test_found_by_its_qualified_name_and_pickled_by_reference(self):
        import importlib
        import pickle

        fop = FunctionalizedOp(torch.ops.trt_mut.add_one_ret.default)
        module = importlib.import_module(fop.__module__)
        # how FX-generated code and pickles refer to a call_function target
        self.assertIs(getattr(module, fop.__name__), fop)
        self.assertIs(pickle.loads(pickle.dumps(fop)), fop)
        with self.assertRaises(AttributeError):
            getattr(module, "functionalized_trt_mut_no_such_op_default")

    def test_kwarg_and_default_arguments(self):
        fop = FunctionalizedOp(torch.ops.trt_mut.add_two_.default)
        x, z = torch.zeros(2), torch.zeros(2)
        self.assertEqual(fop(x, z=z, alpha=5.0), (torch.ones(2), torch.full((2,), 5.0)))
        self.assertEqual(fop(x, z)[1], torch.full((2,), 2.0))
        self.assertEqual(z, torch.zeros(2))

    def test_non_mutating_op_is_rejected(self):
        with self.assertRaisesRegex(ValueError, "does not mutate any argument"):
            FunctionalizedOp(torch.ops.aten.add.Tensor)

    def test_wrong_number_of_converter_outputs_names_op_and_layout(self):
        fop = FunctionalizedOp(torch.ops.trt_mut.add_one_ret.default)
        converter = fop.adapt_converter(lambda ctx, target, args, kwargs, name: args)
        with self.assertRaisesRegex(
            RuntimeError,
            r"converter for trt_mut.add_one_ret.default returned 1 tensor\(s\).*"
            r"must return the op's 1 return\(s\), then the new value of each "
            r"mutated argument \['x'\]",
        ):
            converter(None, fop, (object(),), {}, "n")
        self.assertEqual(converter(None, fop, ("a", "b"), {}, "n"), ("a", "b"))

    def test_converter_lookup_goes_through_the_op(self):
        from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
            DYNAMO_CONVERTERS,
        )

        fop = FunctionalizedOp(torch.ops.trt_mut.add_one_.default)
        self.assertIn(fop, DYNAMO_CONVERTERS)
        self.assertNotIn(
            FunctionalizedOp(torch.ops.trt_mut.no_converter_.default), DYNAMO_CONVERTERS
        )
        seen = {}

        def fake_converter(ctx, target, args, kwargs, name):
            seen["target"] = target
            return "new_x"

        adapted = fop.adapt_converter(fake_converter)
        self.assertEqual(adapted(None, fop, ("x",), {}, "n"), ("new_x",))
        self.assertIs(seen["target"], torch.ops.trt_mut.add_one_.default)


class TestLowering(TestCase):
    def test_mutate_input_return_nothing(self):
        gm = _lowered(MutateInputReturnNothing(), _inputs(1))
        self.assertExpectedInline(
            _graph(gm),
            """\
x = placeholder[x]()
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](x)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
copy__default = call_function[aten.copy_.default](x, getitem_1)
return (None,)""",
        )

    def test_mutate_and_return(self):
        gm = _lowered(MutateAndReturn(), _inputs(2))
        self.assertExpectedInline(
            _graph(gm),
            """\
x = placeholder[x]()
y = placeholder[y]()
functionalized_trt_mut_add_one_ret_default = call_function[FunctionalizedOp(trt_mut.add_one_ret.default)](x, y)
getitem = call_function[getitem](functionalized_trt_mut_add_one_ret_default, 0)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one_ret_default, 1)
add = call_function[aten.add.Tensor](getitem, getitem_1)
copy__default = call_function[aten.copy_.default](x, getitem_1)
return (add,)""",
        )

    def test_two_mutated_args_keep_schema_order(self):
        gm = _lowered(TwoMutatedArgs(), _inputs(2))
        self.assertExpectedInline(
            _graph(gm),
            """\
x = placeholder[x]()
z = placeholder[z]()
functionalized_trt_mut_add_two__default = call_function[FunctionalizedOp(trt_mut.add_two_.default)](x, z, 2.0)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_two__default, 0)
getitem_2 = call_function[getitem](functionalized_trt_mut_add_two__default, 1)
mul = call_function[aten.mul.Tensor](getitem_1, getitem_2)
copy__default = call_function[aten.copy_.default](x, getitem_1)
copy__default_1 = call_function[aten.copy_.default](z, getitem_2)
return (mul,)""",
        )

    def test_buffer_slice_becomes_slice_and_slice_scatter(self):
        gm = _only_this_pass(MutateBufferSlice(), _inputs(1))
        self.assertExpectedInline(
            _graph(gm),
            """\
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
slice_tensor = call_function[aten.slice.Tensor](state, 1, 0, 8)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](slice_tensor)
getitem = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
slice_scatter_default = call_function[aten.slice_scatter.default](state, getitem, 1, 0, 8)
add = call_function[aten.add.Tensor](x, slice_scatter_default)
copy__default = call_function[aten.copy_.default](state, slice_scatter_default)
return (add,)""",
        )

    def test_two_slices_of_one_buffer(self):
        gm = _only_this_pass(MutateTwoSlicesOfOneBuffer(), _inputs(1))
        self.assertExpectedInline(
            _graph(gm),
            """\
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
slice_tensor = call_function[aten.slice.Tensor](state, 1, 0, 8)
slice_tensor_1 = call_function[aten.slice.Tensor](state, 1, 8, 16)
functionalized_trt_mut_add_two__default = call_function[FunctionalizedOp(trt_mut.add_two_.default)](slice_tensor, slice_tensor_1, 2.0)
getitem = call_function[getitem](functionalized_trt_mut_add_two__default, 0)
slice_scatter_default = call_function[aten.slice_scatter.default](state, getitem, 1, 0, 8)
getitem_2 = call_function[getitem](functionalized_trt_mut_add_two__default, 1)
slice_scatter_default_1 = call_function[aten.slice_scatter.default](slice_scatter_default, getitem_2, 1, 8, 16)
add = call_function[aten.add.Tensor](x, slice_scatter_default_1)
copy__default = call_function[aten.copy_.default](state, slice_scatter_default_1)
return (add,)""",
        )
        # the rewritten graph computes what eager computes
        x = _inputs(1)[0]
        eager = MutateTwoSlicesOfOneBuffer()
        self.assertEqual(gm(x), eager(x))
        self.assertEqual(gm.state, eager.state)

    def test_matrix_snapshot(self):
        """Every pattern after lower_auto_functionalized alone."""
        cases = [(name, cls(), n) for name, cls, n in USER_INPUT_CASES]
        cases += [(name, cls(), 1) for name, cls in BUFFER_CASES]
        text = "\n\n".join(
            f"# {name}\n{_graph(_only_this_pass(module, _inputs(n)))}"
            for name, module, n in cases
        )
        self.assertExpectedInline(
            text,
            """\
# inplace_aten_not_returned
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
mul = call_function[aten.mul.Tensor](x, 2)
add = call_function[aten.add.Tensor](mul, 1)
copy__default = call_function[aten.copy_.default](x, mul)
return (add,)

# inplace_aten_returned
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
mul = call_function[aten.mul.Tensor](x, 2)
copy__default = call_function[aten.copy_.default](x, mul)
return (copy__default,)

# mutate_input_not_returned
x = placeholder[x]()
y = placeholder[y]()
_guards_fn = call_module[_guards_fn](x, y)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](x)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
mul = call_function[aten.mul.Tensor](y, 2)
copy__default = call_function[aten.copy_.default](x, getitem_1)
return (mul,)

# mutate_input_returned
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](x)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
copy__default = call_function[aten.copy_.default](x, getitem_1)
return (copy__default,)

# mutate_input_return_nothing
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](x)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
copy__default = call_function[aten.copy_.default](x, getitem_1)
return (None,)

# add_in_place_return_nothing
x = placeholder[x]()
d = placeholder[d]()
_guards_fn = call_module[_guards_fn](x, d)
add = call_function[aten.add.Tensor](x, d)
copy__default = call_function[aten.copy_.default](x, add)
return (None,)

# mutate_and_return
x = placeholder[x]()
y = placeholder[y]()
_guards_fn = call_module[_guards_fn](x, y)
functionalized_trt_mut_add_one_ret_default = call_function[FunctionalizedOp(trt_mut.add_one_ret.default)](x, y)
getitem = call_function[getitem](functionalized_trt_mut_add_one_ret_default, 0)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one_ret_default, 1)
add = call_function[aten.add.Tensor](getitem, getitem_1)
copy__default = call_function[aten.copy_.default](x, getitem_1)
return (add,)

# two_mutated_args
x = placeholder[x]()
z = placeholder[z]()
_guards_fn = call_module[_guards_fn](x, z)
functionalized_trt_mut_add_two__default = call_function[FunctionalizedOp(trt_mut.add_two_.default)](x, z, 2.0)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_two__default, 0)
getitem_2 = call_function[getitem](functionalized_trt_mut_add_two__default, 1)
mul = call_function[aten.mul.Tensor](getitem_1, getitem_2)
copy__default = call_function[aten.copy_.default](x, getitem_1)
copy__default_1 = call_function[aten.copy_.default](z, getitem_2)
return (mul,)

# no_converter
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
auto_functionalized_v2 = call_function[auto_functionalized_v2](trt_mut.no_converter_.default, _x_base_index=0, _all_bases=[x])
getitem_1 = call_function[getitem](auto_functionalized_v2, 1)
add = call_function[aten.add.Tensor](getitem_1, 1)
copy__default = call_function[aten.copy_.default](x, getitem_1)
return (add,)

# mutate_buffer
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](state)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
add = call_function[aten.add.Tensor](x, getitem_1)
copy__default = call_function[aten.copy_.default](state, getitem_1)
return (add,)

# mutate_buffer_slice
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
slice_tensor = call_function[aten.slice.Tensor](state, 1, 0, 8)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](slice_tensor)
getitem = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
slice_scatter_default = call_function[aten.slice_scatter.default](state, getitem, 1, 0, 8)
add = call_function[aten.add.Tensor](x, slice_scatter_default)
copy__default = call_function[aten.copy_.default](state, slice_scatter_default)
return (add,)

# mutate_two_slices_of_one_buffer
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
slice_tensor = call_function[aten.slice.Tensor](state, 1, 0, 8)
slice_tensor_1 = call_function[aten.slice.Tensor](state, 1, 8, 16)
functionalized_trt_mut_add_two__default = call_function[FunctionalizedOp(trt_mut.add_two_.default)](slice_tensor, slice_tensor_1, 2.0)
getitem = call_function[getitem](functionalized_trt_mut_add_two__default, 0)
slice_scatter_default = call_function[aten.slice_scatter.default](state, getitem, 1, 0, 8)
getitem_2 = call_function[getitem](functionalized_trt_mut_add_two__default, 1)
slice_scatter_default_1 = call_function[aten.slice_scatter.default](slice_scatter_default, getitem_2, 1, 8, 16)
add = call_function[aten.add.Tensor](x, slice_scatter_default_1)
copy__default = call_function[aten.copy_.default](state, slice_scatter_default_1)
return (add,)

# return_mutated_buffer
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](state)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
copy__default = call_function[aten.copy_.default](state, getitem_1)
return (copy__default,)

# mutate_buffer_with_other_outputs
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
functionalized_trt_mut_add_one__default = call_function[FunctionalizedOp(trt_mut.add_one_.default)](state)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one__default, 0)
mul = call_function[aten.mul.Tensor](x, 2)
add = call_function[aten.add.Tensor](getitem_1, 1)
copy__default = call_function[aten.copy_.default](state, getitem_1)
return (mul, add)

# mutate_buffer_and_return
state = get_attr[state]()
x = placeholder[x]()
_guards_fn = call_module[_guards_fn](x)
functionalized_trt_mut_add_one_ret_default = call_function[FunctionalizedOp(trt_mut.add_one_ret.default)](state, x)
getitem = call_function[getitem](functionalized_trt_mut_add_one_ret_default, 0)
getitem_1 = call_function[getitem](functionalized_trt_mut_add_one_ret_default, 1)
copy__default = call_function[aten.copy_.default](state, getitem_1)
return (getitem,)""",
        )

    def test_op_without_converter_keeps_its_higher_order_op(self):
        gm = _lowered(NoConverter(), _inputs(1))
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        self.assertIn(torch.ops.higher_order.auto_functionalized_v2, targets)

    def test_torch_executed_ops_keeps_its_higher_order_op(self):
        gm = _lowered(
            MutateInputReturned(),
            _inputs(1),
            torch_executed_ops={torch.ops.trt_mut.add_one_.default},
        )
        targets = [n.target for n in gm.graph.nodes if n.op == "call_function"]
        self.assertIn(torch.ops.higher_order.auto_functionalized_v2, targets)

    def test_auto_functionalized_v1(self):
        import torch._export.config as export_config

        with export_config.patch(enable_auto_functionalized_v2_for_export=False):
            ep = torch.export.export(MutateAndReturn(), _inputs(2))
            gm = ep.run_decompositions().module()
        targets = [n.target for n in gm.graph.nodes]
        self.assertIn(torch.ops.higher_order.auto_functionalized, targets)
        gm = post_lowering(gm, CompilationSettings())
        targets = [n.target for n in gm.graph.nodes]
        self.assertIn(FunctionalizedOp(torch.ops.trt_mut.add_one_ret.default), targets)
        self.assertNotIn(torch.ops.higher_order.auto_functionalized, targets)
        self._check_matches_eager(gm, MutateAndReturn(), _inputs(2))

    def _check_matches_eager(self, gm, module, args):
        lowered_args, eager_args = _clone(args), _clone(args)
        self.assertEqual(gm(*lowered_args), module(*eager_args))
        self.assertEqual(lowered_args, eager_args, msg="mutated inputs differ")

    def test_lowered_graphs_match_eager_including_mutations(self):
        for name, cls, n in USER_INPUT_CASES:
            with self.subTest(name):
                gm = _lowered(cls(), _inputs(n))
                self._check_matches_eager(gm, cls(), _inputs(n))

    def test_models_without_mutations_are_unchanged(self):
        class Plain(torch.nn.Module):
            def forward(self, x):
                return torch.relu(x) * 2

        ep = torch.export.export(Plain(), _inputs(1))
        before = ep.run_decompositions().module()
        after = lower_auto_functionalized(copy.deepcopy(before), CompilationSettings())
        self.assertEqual(str(after.graph), str(before.graph))


@unittest.skipIf(not CPU_BUILDER, NEEDS_CPU_BUILDER)
class TestCompileDryrunOnCpu(TestCase):
    """``compile(dryrun=True)`` partitions without building; the result runs on CPU."""

    def _compile(self, module, args, **kwargs):
        return _dryrun(module, args, **kwargs)

    def test_user_input_matrix_matches_eager(self):
        for name, cls, n in USER_INPUT_CASES:
            for dtype in (torch.float32, torch.float16):
                with self.subTest(name, dtype=dtype):
                    args = _inputs(n, dtype)
                    gm = self._compile(cls(), args)
                    compiled_args, eager_args = _clone(args), _clone(args)
                    self.assertEqual(gm(*compiled_args), cls()(*eager_args))
                    self.assertEqual(compiled_args, eager_args, msg="mutation lost")

    def test_dynamic_batch(self):
        gm = _dryrun_dynamic(MutateAndReturn(), 2)
        for batch_size in (2, 5):
            small = _inputs(2, batch=batch_size)
            compiled_args, eager_args = _clone(small), _clone(small)
            self.assertEqual(gm(*compiled_args), MutateAndReturn()(*eager_args))
            self.assertEqual(compiled_args, eager_args)

    def test_views_tensorrt_cannot_write_back_are_errors_with_full_compilation(self):
        # a strided view is written back by as_strided_scatter's converter
        self._compile(
            MutateTransposedState(), _inputs(1), require_full_compilation=True
        )
        message = r"trt_mut.add_two_.*arguments \['x', 'z'\] may overlap"
        with self.assertRaisesRegex(ValueError, message):
            self._compile(
                MutateOverlappingViews(), _inputs(1), require_full_compilation=True
            )

    def test_require_full_compilation_gives_one_engine(self):
        for name, cls, n in USER_INPUT_CASES:
            if cls is NoConverter:
                continue
            with self.subTest(name):
                gm = self._compile(cls(), _inputs(n), require_full_compilation=True)
                engines = [c for c, _ in gm.named_children() if "_run_on_acc" in c]
                self.assertEqual(engines, ["_run_on_acc_0"])
                # the write-back is the only thing left to PyTorch
                in_torch = [
                    n.target
                    for c, sub in gm.named_children()
                    if "_run_on_gpu" in c
                    for n in sub.graph.nodes
                    if n.op == "call_function"
                ]
                self.assertTrue(
                    set(in_torch) <= {torch.ops.aten.copy_.default}, in_torch
                )


if __name__ == "__main__":
    run_tests()
