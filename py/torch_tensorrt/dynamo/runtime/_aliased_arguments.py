"""Calls whose arguments share memory with an input written in place, refused.

A compiled module or engine computes every new value from its inputs' values on
entry, then writes the mutated inputs; eager PyTorch sees a write through every
argument sharing its memory (``a += 1; b *= 2`` called as ``m(x, x)`` gives 4.0
eagerly, 2.0 compiled). Such a call is refused before anything runs, naming both.

Views of equal sizes and strides are compared exactly; any other two tensors
overlap when their address ranges intersect. Ranges are sorted and swept once.
``compile()``'s module skips a call passing its last call's tensors unchanged;
engines within a call it checked skip their own check (the partitioner gives no
engine two overlapping inputs the caller did not pass:
:mod:`~torch_tensorrt.dynamo.partitioning._in_place_engine_inputs`).
"""

from __future__ import annotations

import contextvars
import inspect
import logging
import operator
from typing import Any, Dict, List, Optional, Sequence, Tuple

import torch
from torch.fx._pytree import tree_flatten_spec

logger = logging.getLogger(__name__)

# read per call for every argument: the unbound C accessors are the cheapest
_VERSION = operator.attrgetter("_version")
_DATA_PTR = torch._C.TensorBase.data_ptr
_TENSORS_ONLY = {torch.Tensor}

# Beyond this many candidate indices along one dimension the exact test stops
# and the two views are taken to overlap
_MAX_CANDIDATES = 64

# Calls of compile()'s modules running in this context whose pre-hook checked the
# arguments: their engines skip their own check. Counted down (never below 0) by
# a forward hook that also runs when forward raises
_CHECKED_CALLS: contextvars.ContextVar[int] = contextvars.ContextVar(
    "torch_tensorrt_checked_calls", default=0
)


def _span(t: torch.Tensor) -> Tuple[int, int]:
    """First and one-past-last byte address ``t``'s elements occupy."""
    start = t.data_ptr()
    extent = sum((size - 1) * stride for size, stride in zip(t.shape, t.stride()))
    return start, start + (extent + 1) * t.element_size()


def _difference_reachable(d: int, dims: Sequence[Tuple[int, int]]) -> bool:
    """Whether ``d = sum(j_k * stride_k)`` with ``|j_k| < size_k`` for some ``j``.

    Every stride in ``dims`` is positive.
    """
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
    # a dimension of stride 0 (an expanded view) repeats one address: it adds
    # no offset, so it is left out of the search
    dims = sorted(
        (
            (stride, size)
            for size, stride in zip(a.shape, a.stride())
            if size > 1 and stride > 0
        ),
        reverse=True,
    )
    return _difference_reachable((b_start - a_start) // itemsize, dims)


def _is_fake(t: torch.Tensor) -> bool:
    # traced calls (export, FakeTensor propagation) have no memory to compare
    return isinstance(t, torch._subclasses.FakeTensor) or t.device.type == "meta"


def _overlapping_pair(
    tensors: Sequence[torch.Tensor], written: Sequence[bool]
) -> Optional[Tuple[int, int]]:
    """The first pair ``(w, k)`` with ``tensors[w]`` written that overlaps ``tensors[k]``.

    Pairs are ordered as a double loop over written ``w`` and then every other
    ``k`` would find them (two written tensors as ``(min, max)``). Address
    ranges are sorted and swept once; only pairs whose ranges meet are compared.
    """
    starts = [t.data_ptr() for t in tensors]
    ends = [
        start + t.nbytes if t.is_contiguous() else _span(t)[1]
        for start, t in zip(starts, tensors)
    ]
    spans = sorted(zip(starts, ends, range(len(tensors))))
    if all(
        map(operator.le, [e for _, e, _ in spans[:-1]], [s for s, _, _ in spans[1:]])
    ):
        return None  # no range meets the next one: none meets another
    found: Optional[Tuple[int, int]] = None
    # the ranges that started before the current one and may still meet it
    earlier: List[Tuple[int, int]] = []  # (end, position)
    reach = 0  # where the last of them ends
    for start, end, position in spans:
        if not start or end <= start:
            continue  # no memory: an empty or a meta tensor
        if start >= reach:
            earlier.clear()  # each one ends before this one starts
        for earlier_end, other in earlier:
            if earlier_end <= start or not (written[position] or written[other]):
                continue  # apart, or two tensors nobody writes
            if not tensors_overlap(tensors[position], tensors[other]):
                continue
            if written[position] and written[other]:
                pair = (min(position, other), max(position, other))
            elif written[position]:
                pair = (position, other)
            else:
                pair = (other, position)
            if found is None or pair < found:
                found = pair
        earlier.append((end, position))
        reach = max(reach, end)
    return found


def _refuse(owner: str, pair: Tuple[int, int], labels: Sequence[str]) -> None:
    w_text, o_text = labels[pair[0]], labels[pair[1]]
    raise RuntimeError(
        f"{owner} writes {w_text} in place and {o_text} shares memory "
        "with it, so the result would differ from eager PyTorch's: "
        f"pass tensors that do not overlap (e.g. a clone of the {o_text})."
    )


def check_in_place_arguments_distinct(
    owner: str,
    values: Sequence[Any],
    names: Sequence[str],
    written: Sequence[int],
) -> None:
    """Refuse a call in which an input written in place shares memory with another.

    ``values[i]`` is the argument for input ``names[i]``; ``written`` are the
    positions of the inputs ``owner`` writes in place.
    """
    if torch.compiler.is_compiling():
        return  # traced, not called: there is no memory to compare
    written_positions = set(written)
    positions: Sequence[int] = range(len(values))  # of the tensors compared
    tensors: List[Any] = list(values)
    if not all(type(v) is torch.Tensor for v in values):
        # numbers, None, subclasses: only real tensors have memory to compare
        positions = [
            i
            for i, v in enumerate(values)
            if isinstance(v, torch.Tensor) and not _is_fake(v)
        ]
        tensors = [values[i] for i in positions]
    is_written = [i in written_positions for i in positions]
    if not any(is_written):
        return
    pair = _overlapping_pair(tensors, is_written)
    if pair is not None:
        _refuse(owner, pair, [f"input '{names[i]}'" for i in positions])


def check_engine_inputs_distinct(
    engine_name: str,
    inputs: Sequence[Any],
    names: Sequence[str],
    written: Sequence[int],
) -> None:
    """An engine's own check of its inputs (``written``: the positions it writes).

    Skipped within a call of ``compile()``'s module whose arguments its pre-hook
    checked, so one call is checked once.
    """
    if _CHECKED_CALLS.get():
        return
    check_in_place_arguments_distinct(f"Engine {engine_name}", inputs, names, written)


class _ArgumentBinder:
    """The values a graph module's placeholders take for ``module(*args, **kwargs)``.

    The signature of its ``forward`` and the structure of its inputs are read
    once. A ``forward`` whose parameters all take one argument each, positional
    or by name (every module ``compile()`` returns), binds without ``inspect``;
    when each argument is one placeholder, the arguments are the values.
    """

    def __init__(self, module: torch.fx.GraphModule) -> None:
        self.signature = inspect.signature(module.forward)
        info = getattr(module.graph._codegen, "pytree_info", None)
        self.in_spec = getattr(info, "in_spec", None)
        parameters = list(self.signature.parameters.values())
        self.names: Optional[Tuple[str, ...]] = None
        if all(
            p.kind == inspect.Parameter.POSITIONAL_OR_KEYWORD
            and p.default is inspect.Parameter.empty
            for p in parameters
        ):
            self.names = tuple(p.name for p in parameters)
        self.flat = self.names is not None and self._flat(len(parameters))

    def _flat(self, count: int) -> bool:
        """Whether the input structure is the parameters in order, one leaf each."""
        if self.in_spec is None:
            return True
        children = _children(self.in_spec)
        return (
            self.in_spec.type is tuple
            and len(children) == 2
            and children[0].type is tuple
            and children[1].type is dict
            and children[0].num_children + children[1].num_children == count
            and all(leaf.is_leaf() for part in children for leaf in _children(part))
            and list(children[1].context)
            == list(self.signature.parameters)[children[0].num_children :]
        )

    def __call__(
        self, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Optional[Sequence[Any]]:
        """``None`` when the call does not bind; ``forward`` then raises its own error."""
        names = self.names
        if names is None:
            return self._general(args, kwargs)
        values: Sequence[Any]
        if not kwargs:
            if len(args) != len(names):
                return None
            values = args
        else:
            rest = names[len(args) :]
            if len(args) > len(names) or len(kwargs) != len(rest):
                return None
            try:
                values = [*args, *(kwargs[name] for name in rest)]
            except KeyError:
                return None
        return values if self.flat else self._flattened(list(values))

    def _general(
        self, args: Tuple[Any, ...], kwargs: Dict[str, Any]
    ) -> Optional[List[Any]]:
        try:
            bound = self.signature.bind(*args, **kwargs)
        except TypeError:
            return None
        values: List[Any] = []
        for name, value in bound.arguments.items():
            kind = self.signature.parameters[name].kind
            if kind == inspect.Parameter.VAR_POSITIONAL:
                values.extend(value)
            elif kind == inspect.Parameter.VAR_KEYWORD:
                values.extend(value.values())
            else:
                values.append(value)
        return self._flattened(values)

    def _flattened(self, values: List[Any]) -> Optional[List[Any]]:
        """The leaves of ``forward``'s arguments, as its pytree prologue takes them."""
        in_spec = self.in_spec
        if in_spec is None:
            return values
        children = _children(in_spec)
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


def _children(spec: Any) -> List[Any]:
    if hasattr(spec, "child"):  # newer torch deprecates children_specs
        return [spec.child(i) for i in range(spec.num_children)]
    return list(spec.children_specs)


class InPlaceArgumentsCheck:
    """Forward pre-hook of a compiled module: no argument overlaps a written input.

    Registered by :func:`register_in_place_arguments_check`; while the call it
    checked runs, the engines inside skip their own check until :meth:`done`.
    """

    def __init__(
        self,
        names: Sequence[str],
        written: Sequence[int],
        buffers: Sequence[str],
        binder: Optional[_ArgumentBinder] = None,
    ) -> None:
        self.names = list(names)
        self.written = list(written)
        self.buffers = list(buffers)
        self._binder = binder
        written_positions = set(self.written)
        self._is_written = [i in written_positions for i in range(len(self.names))]
        # each buffer as (its owner's index in _owner_paths, its name there):
        # a call resolves each owning submodule once, however many buffers it has
        self._owner_paths: List[Tuple[str, ...]] = []
        self._buffer_slots: List[Tuple[int, str]] = []
        for name in self.buffers:
            *owner, leaf = name.split(".")
            if tuple(owner) not in self._owner_paths:
                self._owner_paths.append(tuple(owner))
            self._buffer_slots.append((self._owner_paths.index(tuple(owner)), leaf))
        self._passed: Optional[Tuple[Any, ...]] = None
        self._passed_tensors: List[Any] = []

    def __getstate__(self) -> Dict[str, Any]:
        # the last call's tensors belong to this process, not to a copy
        state = dict(self.__dict__)
        state["_passed"], state["_passed_tensors"] = None, []
        return state

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
        return cls(names, written, buffers, _ArgumentBinder(module))

    def _current_buffers(self, module: torch.nn.Module) -> List[Any]:
        """The value each written buffer has in ``module`` now (``None`` if gone)."""
        owners: List[Any] = []
        for path in self._owner_paths:
            owner: Any = module
            for part in path:
                owner = owner._modules.get(part) or getattr(owner, part, None)
            owners.append(owner)
        states: List[Any] = []
        for index, name in self._buffer_slots:
            owner = owners[index]
            state = owner._buffers.get(name) if owner is not None else None
            states.append(state if state is not None else getattr(owner, name, None))
        return states

    def check(self, module: torch.nn.Module, values: Sequence[Any]) -> None:
        """Refuse ``values`` (one per placeholder) if one overlaps a written input."""
        if len(values) != len(self.names) or torch.compiler.is_compiling():
            return  # forward raises its own error; a traced call has no memory
        states = self._current_buffers(module) if self._buffer_slots else []
        if self._passed is not None and self._same_as_passed(values, states):
            return
        tensors: List[Any] = list(values)
        is_written = self._is_written
        positions: Optional[List[int]] = None  # of the tensors compared: all
        if set(map(type, values)) != _TENSORS_ONLY:
            # numbers, None, subclasses: only real tensors have memory to compare
            positions = [
                i
                for i, v in enumerate(values)
                if isinstance(v, torch.Tensor) and not _is_fake(v)
            ]
            tensors = [values[i] for i in positions]
            is_written = [self._is_written[i] for i in positions]
        buffers = []
        if states:
            is_written = list(is_written)
            for b, state in enumerate(states):
                if isinstance(state, torch.Tensor) and not _is_fake(state):
                    tensors.append(state)
                    is_written.append(True)
                    buffers.append(b)
        pair = _overlapping_pair(tensors, is_written)
        if pair is not None:
            inputs = [f"input '{name}'" for name in self.names]
            labels = inputs if positions is None else [inputs[i] for i in positions]
            labels += [f"buffer '{self.buffers[b]}'" for b in buffers]
            _refuse("The compiled module", pair, labels)
        others = (
            ()
            if positions is None
            else tuple(sorted(set(range(len(values))) - set(positions)))
        )
        try:
            self._passed = (
                None if positions is None else tuple(positions),
                others,
                tuple(states),
                tuple(map(_VERSION, tensors)),
                tuple(map(_DATA_PTR, tensors)),
            )
            self._passed_tensors = tensors
        except RuntimeError:  # an inference tensor has no version: checked
            self._passed, self._passed_tensors = None, []

    def _same_as_passed(self, values: Sequence[Any], states: Sequence[Any]) -> bool:
        """Whether the call passes the last passed call's tensors, unchanged.

        The same objects in the same places, each of the same version (``set_``,
        ``resize_``, ``as_strided_`` ... bump it) and address (``.data =`` moves it).
        Not seen: ``.data =`` giving other strides at the same address.
        """
        assert self._passed is not None
        positions, others, passed_states, versions, addresses = self._passed
        passed = self._passed_tensors
        if positions is None:
            arguments: Sequence[Any] = values
        else:
            arguments = [values[i] for i in positions]
            if any(isinstance(values[i], torch.Tensor) for i in others):
                return False
        # (map stops at the shorter: the arguments are the first tensors passed)
        if not (
            all(map(operator.is_, arguments, passed))
            and all(map(operator.is_, states, passed_states))
        ):
            return False
        try:
            return bool(
                tuple(map(_VERSION, passed)) == versions
                and tuple(map(_DATA_PTR, passed)) == addresses
            )
        except RuntimeError:  # an inference tensor has no version: checked
            return False

    def __call__(
        self,
        module: torch.fx.GraphModule,
        args: Tuple[Any, ...],
        kwargs: Dict[str, Any],
    ) -> None:
        binder = self._binder
        if binder is None:
            binder = self._binder = _ArgumentBinder(module)
        values = binder(args, kwargs)
        if values is None or torch.compiler.is_compiling():
            return None  # forward raises its own error; a traced call is not run
        self.check(module, values)
        # the call is checked: its engines need not check again
        _CHECKED_CALLS.set(_CHECKED_CALLS.get() + 1)
        return None

    def done(self, module: torch.nn.Module, *args: Any) -> None:
        """Forward hook (``always_call=True``): the checked call has ended."""
        if not torch.compiler.is_compiling():
            _CHECKED_CALLS.set(max(_CHECKED_CALLS.get() - 1, 0))


def register_in_place_arguments_check(module: torch.fx.GraphModule) -> None:
    """Refuse calls of ``module`` whose arguments overlap an input it writes.

    A module that writes no input and no buffer is left as it is.
    """
    check = InPlaceArgumentsCheck.of_module(module)
    if check is not None:
        module.register_forward_pre_hook(check, with_kwargs=True)
        module.register_forward_hook(check.done, always_call=True)
        logger.debug(
            f"Calls are checked for arguments overlapping the written inputs "
            f"{[check.names[i] for i in check.written]} and buffers {check.buffers}"
        )
