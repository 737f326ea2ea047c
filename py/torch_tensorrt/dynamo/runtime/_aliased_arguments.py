"""Arguments that share memory with an input written in place, refused at call time.

An engine, or a module ``compile()`` returns, computes every new value from the
values its inputs had on entry and then writes the mutated inputs. Eager PyTorch
runs the model's statements in order, so when the caller passes one tensor (or
overlapping views of one storage) as two arguments and one of them is written,
eager sees the first write through the other argument and the compiled module
does not: ``def forward(self, a, b): a += 1; b *= 2`` called as ``m(x, x)`` gives
4.0 eagerly and 2.0 compiled. Such a call is refused with one sentence naming
both arguments, before anything runs.

Two tensors overlap when some element of one is stored at the address of some
element of the other. Views with the same sizes and strides are compared
exactly (``x[:, 0]`` and ``x[:, 1]`` of one storage do not overlap); any other
pair overlaps when the address ranges they span intersect.
"""

from __future__ import annotations

import inspect
import logging
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch.fx._pytree import tree_flatten_spec

logger = logging.getLogger(__name__)

# Beyond this many candidate indices along one dimension the exact test stops
# and the two views are taken to overlap
_MAX_CANDIDATES = 64


def _span(t: torch.Tensor) -> Tuple[int, int]:
    """First and one-past-last byte address ``t``'s elements occupy."""
    start = t.data_ptr()
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (extent + 1) * t.element_size()


def _difference_reachable(d: int, dims: Sequence[Tuple[int, int]]) -> bool:
    """Whether ``d = sum(j_k * stride_k)`` with ``|j_k| < size_k`` for some ``j``."""
    if not dims:
        return d == 0
    (stride, size), rest = dims[0], dims[1:]
    reach = sum((n - 1) * s for s, n in rest)
    low = max(-(size - 1), -((reach - d) // stride))  # ceil((d - reach) / stride)
    high = min(size - 1, (d + reach) // stride)
    if high - low >= _MAX_CANDIDATES:
        return True
    return any(
        _difference_reachable(d - j * stride, rest) for j in range(low, high + 1)
    )


def tensors_overlap(a: torch.Tensor, b: torch.Tensor) -> bool:
    """Whether an element of ``a`` and an element of ``b`` share an address."""
    if a.numel() == 0 or b.numel() == 0 or a.device != b.device:
        return False
    (a_start, a_end), (b_start, b_end) = _span(a), _span(b)
    if a_end <= b_start or b_end <= a_start:
        return False
    if a.is_contiguous() or b.is_contiguous():
        # one fills its span, which meets the other's: taken to overlap (a strided
        # view whose elements all fall outside the span is refused too)
        return True
    itemsize = a.element_size()
    if (
        a.shape != b.shape
        or a.stride() != b.stride()
        or b.element_size() != itemsize
        or (b_start - a_start) % itemsize
    ):
        return True
    dims = sorted(
        ((stride, size) for size, stride in zip(a.shape, a.stride()) if size > 1),
        reverse=True,
    )
    return _difference_reachable((b_start - a_start) // itemsize, dims)


def _shown(name: str) -> str:
    return f"'{name}'"


def check_in_place_arguments_distinct(
    owner: str,
    values: Sequence[Any],
    names: Sequence[str],
    written: Sequence[int],
    kept_states: Sequence[Tuple[str, torch.Tensor]] = (),
) -> None:
    """Refuse a call in which an input written in place shares memory with another.

    ``values[i]`` is the argument for input ``names[i]``; ``written`` are the
    positions of the inputs ``owner`` writes in place; ``kept_states`` are the
    tensors it keeps and writes itself (its mutated buffers), named.
    """
    if torch.compiler.is_compiling():
        return  # traced, not called: there is no memory to compare
    written_positions = set(written)
    # (how the message names it, the tensor, whether owner writes it)
    entries: List[Tuple[str, torch.Tensor, bool]] = [
        (f"input {_shown(names[i])}", v, i in written_positions)
        for i, v in enumerate(values)
        if isinstance(v, torch.Tensor) and not _is_fake(v)
    ]
    entries += [
        (f"buffer {_shown(name)}", state, True)
        for name, state in kept_states
        if not _is_fake(state)
    ]
    for w, (w_text, w_tensor, w_written) in enumerate(entries):
        if not w_written:
            continue
        for k, (o_text, o_tensor, o_written) in enumerate(entries):
            if k == w or (o_written and k < w):
                continue  # itself, or a pair already compared
            if tensors_overlap(w_tensor, o_tensor):
                raise RuntimeError(
                    f"{owner} writes {w_text} in place and {o_text} shares memory "
                    "with it, so the result would differ from eager PyTorch's: "
                    f"pass tensors that do not overlap (e.g. a clone of the {o_text})."
                )


def _is_fake(t: torch.Tensor) -> bool:
    # traced calls (export, FakeTensor propagation) have no memory to compare
    return isinstance(t, torch._subclasses.FakeTensor) or t.device.type == "meta"


def flat_graph_inputs(
    module: torch.fx.GraphModule, args: Tuple[Any, ...], kwargs: Dict[str, Any]
) -> Optional[List[Any]]:
    """The values ``module``'s placeholders take for ``module(*args, **kwargs)``.

    ``None`` when the call does not bind; ``forward`` then raises its own error.
    """
    signature = inspect.signature(module.forward)
    try:
        bound = signature.bind(*args, **kwargs)
    except TypeError:
        return None
    values: List[Any] = []
    for name, value in bound.arguments.items():
        kind = signature.parameters[name].kind
        if kind == inspect.Parameter.VAR_POSITIONAL:
            values.extend(value)
        elif kind == inspect.Parameter.VAR_KEYWORD:
            values.extend(value.values())
        else:
            values.append(value)
    info = getattr(module.graph._codegen, "pytree_info", None)
    in_spec = getattr(info, "in_spec", None)
    if in_spec is None:
        return values
    # the prologue the pytree code generator writes into forward
    children = (
        [in_spec.child(i) for i in range(in_spec.num_children)]
        if hasattr(in_spec, "child")  # newer torch deprecates children_specs
        else list(in_spec.children_specs)
    )
    if (
        in_spec.type is tuple
        and len(children) == 2
        and children[0].type is tuple
        and children[1].type is dict
    ):
        count = children[0].num_children
        structure: Any = (
            values[:count],
            dict(zip(children[1].context, values[count:])),
        )
    else:
        structure = values
    try:
        return list(tree_flatten_spec(structure, in_spec))
    except Exception:  # the generated forward raises its own error
        return None


class InPlaceArgumentsCheck:
    """Forward pre-hook of a compiled module: no argument overlaps a written input.

    Registered by ``compile()`` on a module that writes some of its inputs or
    buffers; ``written`` and ``buffers`` come from the module's graph
    (:func:`~torch_tensorrt.dynamo.runtime._input_mutations.mutated_inputs` and
    ``mutated_buffers``), ``names`` are its placeholders.
    """

    def __init__(
        self, names: Sequence[str], written: Sequence[int], buffers: Sequence[str]
    ) -> None:
        self.names = list(names)
        self.written = list(written)
        self.buffers = list(buffers)

    @classmethod
    def of_module(cls, module: torch.fx.GraphModule) -> Optional[InPlaceArgumentsCheck]:
        """The check for ``module``; ``None`` if it writes no input and no buffer."""
        from torch_tensorrt.dynamo.runtime._input_mutations import (
            mutated_buffers,
            mutated_inputs,
        )

        written, buffers = mutated_inputs(module), mutated_buffers(module)
        if not written and not buffers:
            return None
        names = [str(n.target) for n in module.graph.nodes if n.op == "placeholder"]
        return cls(names, written, buffers)

    def check(self, module: torch.nn.Module, values: Sequence[Any]) -> None:
        """Refuse ``values`` (one per placeholder) if one overlaps a written input."""
        if len(values) != len(self.names):
            return  # forward raises its own error
        states = []
        for name in self.buffers:
            state: Any = module
            for part in name.split("."):
                state = getattr(state, part, None)
            if isinstance(state, torch.Tensor):
                states.append((name, state))
        check_in_place_arguments_distinct(
            "The compiled module", values, self.names, self.written, states
        )

    def __call__(
        self,
        module: torch.fx.GraphModule,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
    ) -> None:
        values = flat_graph_inputs(module, args, kwargs)
        if values is not None:
            self.check(module, values)
        return None


def register_in_place_arguments_check(module: torch.nn.Module) -> None:
    """Refuse calls of ``module`` whose arguments overlap an input it writes.

    A module that writes no input and no buffer is left as it is.
    """
    if not isinstance(module, torch.fx.GraphModule):
        return
    check = InPlaceArgumentsCheck.of_module(module)
    if check is not None:
        module.register_forward_pre_hook(check, with_kwargs=True)
        logger.debug(
            f"Calls are checked for arguments overlapping the written inputs "
            f"{[check.names[i] for i in check.written]} and buffers {check.buffers}"
        )
