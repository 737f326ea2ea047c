"""Lower ``auto_functionalized(_v2)`` onto the mutating op's own converter (#4240).

Each becomes a ``FunctionalizedOp`` call with the op's own arguments, so the ``copy_``
write-backs keep their meaning; a v2 argument passed as a view of a base is that view,
and the new base its new value scattered into the old one. What stays in PyTorch: an
op with no converter, or :func:`_why_not_lowered`. Each write-back gets its value's
metadata, without which symbolic shape capture fails on a returned mutated input.
"""

from __future__ import annotations

import logging
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch._higher_order_ops.auto_functionalize import (
    auto_functionalized,
    auto_functionalized_v2,
)
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.conversion._ConverterRegistry import (
    DYNAMO_CONVERTERS,
    ConverterRegistry,
)
from torch_tensorrt.dynamo.conversion._functionalized_op import (
    FunctionalizedOp,
    mutated_arguments,
)
from torch_tensorrt.dynamo.lowering.passes.pass_utils import (
    clean_up_graph_after_modifications,
)
from torch_tensorrt.dynamo.utils import is_write_back

logger = logging.getLogger(__name__)

# How auto_functionalized_v2 takes an argument from its base: the view's
# parameters (``_<arg>_<parameter>``), the view and the scatter that undoes it
_VIEWS = {
    "slice": (
        ("slice_dim", "slice_start", "slice_end"),
        torch.ops.aten.slice.Tensor,
        torch.ops.aten.slice_scatter.default,
    ),
    "as_strided": (
        ("size", "stride", "storage_offset"),
        torch.ops.aten.as_strided.default,
        torch.ops.aten.as_strided_scatter.default,
    ),
}
_View = Tuple[Optional[str], Tuple[Any, ...]]  # (kind or None for the base, parameters)


def _view(kwargs: Dict[str, Any], name: str) -> _View:
    for kind, (params, _, _) in _VIEWS.items():
        if f"_{name}_{params[0]}" in kwargs:
            return kind, tuple(kwargs[f"_{name}_{p}"] for p in params)
    return None, ()


def _has_converter(op: torch._ops.OpOverload, settings: CompilationSettings) -> bool:
    # torch_executed_ops from the settings: the registry learns them only later
    executed_in_torch = settings.torch_executed_ops
    if op in executed_in_torch or (
        ConverterRegistry.qualified_name_or_str(op) in executed_in_torch
    ):
        return False
    return op in DYNAMO_CONVERTERS.unique_targets()


def _why_not_lowered(node: torch.fx.Node, op: torch._ops.OpOverload) -> str:
    """Why the op's converter cannot take ``node``; empty when it can."""
    bases: Dict[int, List[Tuple[str, _View]]] = {}
    for arg in mutated_arguments(op._schema):
        arg_type = arg.type
        if isinstance(arg_type, torch.OptionalType):
            arg_type = arg_type.getElementType()
        if isinstance(arg_type, torch.ListType):
            return (
                f"{op}: its mutated argument '{arg.name}' is a list of tensors "
                "(Tensor(a!)[]), whose new values a converter cannot return"
            )
        base = node.kwargs.get(f"_{arg.name}_base_index")
        if base is not None:
            bases.setdefault(base, []).append((arg.name, _view(node.kwargs, arg.name)))
    for group in bases.values():
        # two arguments of one base: only disjoint slices along one dimension
        spans = sorted(params[1:] for _, (kind, params) in group)
        if len(group) > 1 and (
            any(kind != "slice" for _, (kind, _) in group)
            or len({params[0] for _, (_, params) in group}) > 1
            or any(
                not isinstance(end, int) or not isinstance(start, int) or start < end
                for (_, end), (start, _) in zip(spans, spans[1:])
            )
        ):
            return (
                f"{op}: its mutated arguments {[name for name, _ in group]} may "
                "overlap in one tensor (expected disjoint slices of it)"
            )
    return ""


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


def _rewrite(
    node: torch.fx.Node, op: torch._ops.OpOverload, fake: _FakeEvaluator
) -> None:
    target = FunctionalizedOp(op)
    graph = node.graph
    values = dict(node.kwargs)
    return_slots = max(target.num_returns, 1)
    # the higher-order op's output slot of each mutated argument's new value
    slot_of = {name: return_slots + k for k, name in enumerate(target.mutated)}
    views: Dict[str, _View] = {}
    meta = {k: v for k, v in node.meta.items() if k not in ("val", "tensor_meta")}

    def create(fn: Any, args: Tuple[Any, ...], val: Any = None) -> torch.fx.Node:
        new = graph.call_function(fn, args)
        new.meta.update(meta)
        new.meta["val"] = fake(fn, args, {}) if val is None else val
        return new

    with graph.inserting_before(node):
        if node.target is auto_functionalized_v2:
            for name in target.mutated:
                base = values.pop(f"_{name}_base_index")
                kind, params = views[name] = _view(values, name)
                values[name] = None if base is None else values["_all_bases"][base]
                if kind is not None and base is not None:
                    values[name] = create(_VIEWS[kind][1], (values[name], *params))
                slot_of[name] = -1 if base is None else return_slots + base
        schema = op._schema.arguments
        call_args = tuple(
            values.get(a.name, a.default_value) for a in schema if not a.kwarg_only
        )
        call_kwargs = {a.name: values[a.name] for a in schema if a.kwarg_only}
        call = graph.call_function(target, call_args, call_kwargs)
    call.meta.update(meta)
    hop_val = node.meta.get("val")

    def known(slot: int) -> Any:
        """The higher-order op's value at ``slot``: a return, or a whole new argument"""
        if isinstance(hop_val, (tuple, list)) and 0 <= slot < len(hop_val):
            return hop_val[slot]
        return None

    # a view's new value looks like the view
    vals = [known(slot) for slot in range(target.num_returns)] + [
        values[n].meta.get("val") if views.get(n, (None,))[0] else known(slot_of[n])
        for n in target.mutated
    ]
    unknown = vals[: target.num_returns] + [
        v
        for v, n in zip(vals[target.num_returns :], target.mutated)
        if values.get(n) is not None
    ]
    missing = any(v is None for v in unknown)
    call.meta["val"] = fake(target, call_args, call_kwargs) if missing else tuple(vals)
    mutated_at = {slot: k for k, slot in enumerate(slot_of.values())}
    for getitem in list(node.users):
        slot = getitem.args[1]
        written = [n for n in target.mutated if slot_of[n] == slot]
        if slot < return_slots or all(
            views.get(n, (None,))[0] is None for n in written
        ):
            index = (
                slot if slot < return_slots else target.num_returns + mutated_at[slot]
            )
            getitem.args = (call, index)
            continue
        # a base written through views: each view's new value scattered into it
        value = node.kwargs["_all_bases"][slot - return_slots]
        with graph.inserting_before(getitem):
            for name in written:
                kind, params = views[name]
                assert kind is not None  # a whole base is one argument's alone
                index = target.num_returns + target.mutated.index(name)
                new = create(operator.getitem, (call, index), call.meta["val"][index])
                value = create(_VIEWS[kind][2], (value, new, *params), known(slot))
        getitem.replace_all_uses_with(value)
        graph.erase_node(getitem)
    graph.erase_node(node)


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
        if is_write_back(node) and "val" not in node.meta:
            source = node.args[0]
            if isinstance(source, torch.fx.Node) and "val" in source.meta:
                node.meta["val"] = source.meta["val"]
        if node.op != "call_function" or node.target not in (
            auto_functionalized,
            auto_functionalized_v2,
        ):
            continue
        op = node.args[0]
        if not _has_converter(op, settings):
            continue
        reason = _why_not_lowered(node, op)
        if reason:
            if settings.require_full_compilation:
                raise ValueError(
                    f"{reason}, and require_full_compilation=True forbids running "
                    "the op in PyTorch"
                )
            node.meta[RUNS_IN_PYTORCH] = reason
            logger.warning(f"{reason}; the op runs in PyTorch")
            continue
        _rewrite(node, op, fake)
        count += 1

    if count:
        gm = clean_up_graph_after_modifications(gm)
        if logger.isEnabledFor(logging.DEBUG):  # printing a large graph is slow
            logger.debug(f"Lowered {count} auto_functionalized node(s):\n{gm.graph}")
    return gm


def refuse_ops_left_to_pytorch(gm: torch.fx.GraphModule) -> None:
    """Raise ``ValueError`` for a mutating op :func:`lower_auto_functionalized` left
    to PyTorch, with its reason: a standalone engine cannot run it."""
    for node in gm.graph.nodes:
        reason = node.meta.get(RUNS_IN_PYTORCH)
        if reason is not None:
            raise ValueError(
                f"{reason}, and a standalone engine cannot run the op in PyTorch"
            )
