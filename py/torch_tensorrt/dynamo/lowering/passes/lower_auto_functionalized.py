"""Lower ``auto_functionalized`` / ``auto_functionalized_v2`` onto the op's converter.

``run_decompositions`` turns every call of a mutating op into one of the
higher-order ops ``auto_functionalized`` (v1) or ``auto_functionalized_v2``. Both
return ``(*returns, *new_values)`` (a single ``None`` stands for "no returns"),
but v1 passes each mutated argument directly while v2 passes bases
(``_all_bases``) plus, per mutated argument ``X``, ``_X_base_index`` and an
optional view of the base (``_X_slice_dim/_start/_end`` or
``_X_size/_X_stride/_X_storage_offset``). No converter handles either, so the op
never reaches its own converter.

This pass rewrites such a node into a call of
:class:`~torch_tensorrt.dynamo.conversion._functionalized_op.FunctionalizedOp`
with the op's own schema arguments (views become ``aten.slice`` /
``aten.as_strided`` nodes) and rebuilds each new base from the new argument
values (``aten.slice_scatter`` / ``aten.as_strided_scatter`` for views).

Invariant: every value the rewritten graph computes equals the value the
higher-order op computed, and nothing is mutated in place. The rewrite only
reorders how the same functional result is built, so the ``copy_`` write-backs
that ``ExportedProgram.module()`` appends (and that carry the mutation to the
caller) keep their meaning. A node is left unchanged, to run in PyTorch with
torch's own semantics, when the op has no converter, is in
``torch_executed_ops``, or its mutated arguments may overlap (two arguments on
one base that are not disjoint slices), because then the order of their writes
matters and a functional call cannot express it.
"""

from __future__ import annotations

import logging
import operator
from dataclasses import dataclass
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch._higher_order_ops.auto_functionalize import (
    auto_functionalized,
    auto_functionalized_v2,
)
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    FunctionalizedOp,
    mutated_arguments,
)
from torch_tensorrt.dynamo.lowering.passes.pass_utils import (
    clean_up_graph_after_modifications,
)

logger = logging.getLogger(__name__)

_AUTO_FUNCTIONALIZED = (auto_functionalized, auto_functionalized_v2)


@dataclass(frozen=True)
class _View:
    """How a v2 mutated argument is taken from its base (``None`` kind: the base itself)."""

    kind: Optional[str]  # None, "slice" or "as_strided"
    params: Tuple[Any, ...] = ()


@dataclass(frozen=True)
class _MutatedArg:
    name: str
    base_index: Optional[int]  # v2 only; None for v1 or an omitted optional tensor
    view: _View


def _has_converter(op: torch._ops.OpOverload, settings: CompilationSettings) -> bool:
    # Imported here: the converter registry imports the conversion package, which
    # must not be a module-level dependency of the lowering passes.
    from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
        DYNAMO_CONVERTERS,
        ConverterRegistry,
    )

    executed_in_torch = settings.torch_executed_ops
    if op in executed_in_torch or (
        ConverterRegistry.qualified_name_or_str(op) in executed_in_torch
    ):
        return False
    return op in DYNAMO_CONVERTERS.unique_targets()


def _v2_view(kwargs: Dict[str, Any], name: str) -> _View:
    if f"_{name}_slice_dim" in kwargs:
        return _View(
            "slice",
            tuple(kwargs[f"_{name}_slice_{p}"] for p in ("dim", "start", "end")),
        )
    if f"_{name}_size" in kwargs:
        return _View(
            "as_strided",
            tuple(kwargs[f"_{name}_{p}"] for p in ("size", "stride", "storage_offset")),
        )
    return _View(None)


def _may_overlap(args: Sequence[_MutatedArg]) -> bool:
    """True unless every pair of arguments on one base is a disjoint slice on one dim."""
    by_base: Dict[int, List[_MutatedArg]] = {}
    for arg in args:
        if arg.base_index is not None:
            by_base.setdefault(arg.base_index, []).append(arg)
    for group in by_base.values():
        if len(group) < 2:
            continue
        if any(arg.view.kind != "slice" for arg in group):
            return True
        dims = {arg.view.params[0] for arg in group}
        if len(dims) != 1:
            return True
        spans = sorted((arg.view.params[1], arg.view.params[2]) for arg in group)
        for (_, end), (start, _) in zip(spans, spans[1:]):
            if not all(isinstance(v, int) for v in (end, start)) or start < end:
                return True
    return False


class _FakeEvaluator:
    """Computes ``meta['val']`` of new nodes from their inputs' fake values."""

    def __init__(self, gm: torch.fx.GraphModule) -> None:
        self.gm = gm
        self.fake_mode = torch._guards.detect_fake_mode(
            [node.meta.get("val") for node in gm.graph.nodes]
        )

    def _val(self, a: Any) -> Any:
        if isinstance(a, torch.fx.Node):
            if "val" not in a.meta and a.op == "get_attr" and self.fake_mode:
                # ExportedProgram.module() leaves buffers as get_attr without metadata
                a.meta["val"] = self.fake_mode.from_tensor(
                    getattr(self.gm, str(a.target))
                )
            return a.meta.get("val")
        if isinstance(a, (list, tuple)):
            return type(a)(self._val(x) for x in a)
        return a

    def __call__(self, target: Any, args: Sequence[Any], kwargs: Dict[str, Any]) -> Any:
        if self.fake_mode is None:
            return None
        fake_args = [self._val(a) for a in args]
        fake_kwargs = {k: self._val(v) for k, v in kwargs.items()}
        with self.fake_mode:
            return target(*fake_args, **fake_kwargs)


def _functionalized_val(
    target: FunctionalizedOp,
    call_args: Sequence[Any],
    call_kwargs: Dict[str, Any],
    mutated: Sequence[_MutatedArg],
    v2: bool,
    known_val: Any,
    return_slots: int,
) -> Optional[Tuple[Any, ...]]:
    """``meta['val']`` of the functional call from the higher-order op's value.

    Own returns and new values of whole bases (v2) or arguments (v1) are the
    higher-order op's; a view argument's new value looks like the view itself.
    Returns None when something is not recorded (then the caller evaluates).
    """
    positions = {a.name: i for i, a in enumerate(target.op._schema.arguments)}
    values: List[Any] = [known_val(i) for i in range(target.num_returns)]
    for k, m in enumerate(mutated):
        if not v2:
            values.append(known_val(return_slots + k))
        elif m.base_index is None:
            values.append(None)
            continue
        elif m.view.kind is None:
            values.append(known_val(return_slots + m.base_index))
        else:
            i = positions[m.name]
            view = call_args[i] if i < len(call_args) else call_kwargs.get(m.name)
            values.append(
                view.meta.get("val") if isinstance(view, torch.fx.Node) else None
            )
        if values[-1] is None:
            return None
    if any(v is None for v in values[: target.num_returns]):
        return None
    return tuple(values)


def _rewrite(
    gm: torch.fx.GraphModule,
    node: torch.fx.Node,
    op: torch._ops.OpOverload,
    fake: _FakeEvaluator,
    settings: CompilationSettings,
) -> bool:
    schema = op._schema
    listed = [a.name for a in mutated_arguments(schema) if _is_list(a.type)]
    if listed:
        reason = (
            f"{op}: its mutated argument '{listed[0]}' is a list of tensors "
            "(Tensor(a!)[]), whose new values a converter cannot return"
        )
        if settings.require_full_compilation:
            raise ValueError(
                f"{reason}, and require_full_compilation=True forbids running the "
                "op in PyTorch"
            )
        node.meta[RUNS_IN_PYTORCH] = reason
        logger.warning(f"{reason}; the op runs in PyTorch")
        return False
    kwargs = dict(node.kwargs)
    v2 = node.target is auto_functionalized_v2
    bases: List[torch.fx.Node] = list(kwargs.get("_all_bases", []))
    mutated = []
    for arg in mutated_arguments(schema):
        if v2:
            mutated.append(
                _MutatedArg(
                    arg.name,
                    kwargs[f"_{arg.name}_base_index"],
                    _v2_view(kwargs, arg.name),
                )
            )
        else:
            mutated.append(_MutatedArg(arg.name, None, _View(None)))
    if v2 and _may_overlap(mutated):
        reason = (
            f"{op}: mutated arguments {[m.name for m in mutated]} may overlap in one "
            "base (expected disjoint slices of it)"
        )
        if settings.require_full_compilation:
            raise ValueError(
                f"{reason}, so the op cannot run in TensorRT and "
                "require_full_compilation=True forbids running it in PyTorch"
            )
        logger.info(f"{reason}; the op runs in PyTorch")
        return False
    for m in mutated:
        if (
            m.view.kind == "as_strided"
            and settings.require_full_compilation
            and not _has_converter(torch.ops.aten.as_strided_scatter.default, settings)
        ):
            size, stride, offset = m.view.params
            raise ValueError(
                f"{op}: mutated argument '{m.name}' is a strided view of its base "
                f"(size {size}, stride {stride}, storage offset {offset}); only the "
                "whole base or a slice of it can be written back inside TensorRT, "
                "and require_full_compilation=True forbids writing it back in PyTorch"
            )

    graph = gm.graph
    meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}

    # The higher-order op's own value already describes every new base and the
    # returns; reuse it instead of running fake kernels again for them.
    hop_val = node.meta.get("val")
    return_slots = max(len(schema.returns), 1)

    def create(
        target: Any, args: Tuple[Any, ...], val: Optional[Any] = None
    ) -> torch.fx.Node:
        new = graph.call_function(target, args)
        new.meta.update(meta)
        new.meta["val"] = fake(target, args, {}) if val is None else val
        return new

    def known_val(index: int) -> Optional[Any]:
        """Value of output ``index`` of the higher-order op, when recorded."""
        if isinstance(hop_val, (tuple, list)) and index < len(hop_val):
            return hop_val[index]
        return None

    call_args: List[Any] = []
    call_kwargs: Dict[str, Any] = {}
    by_name = {m.name: m for m in mutated}
    with graph.inserting_before(node):
        for arg in schema.arguments:
            if arg.name in by_name and v2:
                m = by_name[arg.name]
                if m.base_index is None:
                    value: Any = None
                else:
                    base = bases[m.base_index]
                    if m.view.kind == "slice":
                        value = create(
                            torch.ops.aten.slice.Tensor, (base, *m.view.params)
                        )
                    elif m.view.kind == "as_strided":
                        value = create(
                            torch.ops.aten.as_strided.default, (base, *m.view.params)
                        )
                    else:
                        value = base
            elif arg.name in kwargs:
                value = kwargs[arg.name]
            elif arg.has_default_value():
                value = arg.default_value
            else:
                raise RuntimeError(
                    f"{node.format_node()}: no value for argument '{arg.name}' of {op}"
                )
            if arg.kwarg_only:
                call_kwargs[arg.name] = value
            else:
                call_args.append(value)

        target = FunctionalizedOp(op)
        call = graph.call_function(target, tuple(call_args), call_kwargs)
        call.meta.update(meta)
        call.meta["val"] = _functionalized_val(
            target, call_args, call_kwargs, mutated, v2, known_val, return_slots
        )
        if call.meta["val"] is None:
            call.meta["val"] = fake(target, call_args, call_kwargs)
        outputs = [
            create(operator.getitem, (call, i)) for i in range(target.num_outputs)
        ]

    returns = outputs[: target.num_returns]
    new_args = dict(zip(target.mutated, outputs[target.num_returns :]))

    def new_base(index: int, before: torch.fx.Node) -> torch.fx.Node:
        value: torch.fx.Node = bases[index]
        with graph.inserting_before(before):
            for m in mutated:
                if m.base_index != index:
                    continue
                if m.view.kind is None:
                    value = new_args[m.name]
                elif m.view.kind == "slice":
                    value = create(
                        torch.ops.aten.slice_scatter.default,
                        (value, new_args[m.name], *m.view.params),
                        known_val(return_slots + index),
                    )
                else:
                    value = create(
                        torch.ops.aten.as_strided_scatter.default,
                        (value, new_args[m.name], *m.view.params),
                        known_val(return_slots + index),
                    )
        return value

    for user in list(node.users):
        if user.op != "call_function" or user.target is not operator.getitem:
            raise RuntimeError(
                f"{node.format_node()}: unexpected user {user.format_node()}"
            )
        index = user.args[1]
        assert isinstance(index, int)
        if index < return_slots:
            replacement = returns[index] if target.num_returns else None
            assert replacement is not None, f"{user.format_node()} reads a None return"
        elif v2:
            replacement = new_base(index - return_slots, user)
        else:
            replacement = new_args[target.mutated[index - return_slots]]
        user.replace_all_uses_with(replacement)
        graph.erase_node(user)
    graph.erase_node(node)
    return True


def _is_list(arg_type: Any) -> bool:
    """``Tensor[]`` or ``Tensor[]?``: a list of tensors, optional or not."""
    if isinstance(arg_type, torch.OptionalType):
        arg_type = arg_type.getElementType()
    return isinstance(arg_type, torch.ListType)


# Why a mutating op with a converter is left to PyTorch (on its
# auto_functionalized node); a standalone engine, which cannot, refuses it
RUNS_IN_PYTORCH = "_trt_runs_in_pytorch"


def lower_auto_functionalized(
    gm: torch.fx.GraphModule, settings: CompilationSettings
) -> torch.fx.GraphModule:
    """Rewrite ``auto_functionalized(_v2)`` of convertible ops into ``FunctionalizedOp`` calls"""
    count = 0
    fake = _FakeEvaluator(gm)
    for node in list(gm.graph.nodes):
        if node.op != "call_function" or node.target not in _AUTO_FUNCTIONALIZED:
            continue
        op = node.args[0]
        if not isinstance(op, torch._ops.OpOverload) or not _has_converter(
            op, settings
        ):
            continue
        if _rewrite(gm, node, op, fake, settings):
            count += 1

    if count:
        gm = clean_up_graph_after_modifications(gm)
        if logger.isEnabledFor(logging.DEBUG):  # printing a large graph is slow
            logger.debug(f"Lowered {count} auto_functionalized node(s):\n{gm.graph}")
    return gm


def refuse_ops_left_to_pytorch(gm: torch.fx.GraphModule) -> None:
    """Raise for a mutating op :func:`lower_auto_functionalized` left to PyTorch.

    A standalone engine has no PyTorch around it to run such an op, whose
    mutation would otherwise end in the interpreter's "not supported" error
    with no reason. Raises ``ValueError`` with the reason (naming the op and
    the argument).
    """
    for node in gm.graph.nodes:
        reason = node.meta.get(RUNS_IN_PYTORCH)
        if reason is not None:
            raise ValueError(
                f"{reason}, and a standalone engine cannot run the op in PyTorch"
            )
