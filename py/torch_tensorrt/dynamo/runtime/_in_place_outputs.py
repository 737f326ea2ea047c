"""Engine outputs written into an engine input, returned without a copy.

An output in an engine's ``aliased_io`` is bound to its input's memory. The C++
``tensorrt::execute_engine`` returns that input as the output; the Python
runtime's ``custom_op`` may not return an input, so it leaves those outputs out
(:func:`op_outputs`) and ``TorchTensorRTModule.forward`` puts the inputs back
(:func:`with_inputs_written_in_place`, :func:`copy_staged_inputs_back`).
"""

from __future__ import annotations

from typing import List, Mapping, Optional, Sequence, Tuple, TypeVar

import torch

T = TypeVar("T")

# (output index, input index) pairs
InPlaceOutputs = Tuple[Tuple[int, int], ...]


def in_place_outputs(
    output_binding_names: Sequence[str],
    input_binding_names: Sequence[str],
    aliased_io: Mapping[str, Tuple[str, str]],
) -> InPlaceOutputs:
    """The outputs of an engine written into one of its inputs; ``aliased_io`` maps
    an output binding name to ``(input binding name, kind)``, any kind counting."""
    pairs = []
    for o, name in enumerate(output_binding_names):
        alias = aliased_io.get(name)
        if alias is None:
            continue
        if alias[0] not in input_binding_names:
            raise ValueError(
                f"Engine output '{name}' is aliased to input '{alias[0]}', which is "
                f"not an input of the engine (inputs: {list(input_binding_names)})"
            )
        pairs.append((o, list(input_binding_names).index(alias[0])))
    return tuple(pairs)


def returned_outputs(outputs: Sequence[T], written: InPlaceOutputs) -> List[T]:
    """``outputs`` without the ones written into an input."""
    skipped = {o for o, _ in written}
    return [out for o, out in enumerate(outputs) if o not in skipped]


def with_inputs_written_in_place(
    returned: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
    written: InPlaceOutputs,
    bound: Optional[Sequence[torch.Tensor]] = None,
) -> List[torch.Tensor]:
    """All outputs again: each one left out of ``returned`` is its input.

    ``bound`` (default: ``inputs``, the caller's tensors) are those the engine
    received; a caller's tensor moved to the device receives what was written.
    """
    outputs = list(returned)
    for o, i in written:  # in increasing output order
        if bound is not None and bound[i] is not inputs[i]:
            inputs[i].copy_(bound[i])
        outputs.insert(o, inputs[i])
    return outputs


def callers_tensors_written(
    outputs: Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
    written: InPlaceOutputs,
) -> List[torch.Tensor]:
    """The C++ runtime's outputs, each in-place one the caller's input again.

    The C++ runtime returns a contiguous view of the caller's input, or a copy
    (input not contiguous or not on the device) that the caller's tensor receives.
    """
    result = list(outputs)
    for o, i in written:
        output, caller = result[o], inputs[i]
        if output is caller:
            continue
        if output.data_ptr() != caller.data_ptr() or output.device != caller.device:
            caller.copy_(output.reshape(caller.shape))
        result[o] = caller
    return result


def copy_staged_inputs_back(
    inputs: Sequence[torch.Tensor],
    bound: Sequence[torch.Tensor],
    written: InPlaceOutputs,
) -> None:
    """Write what the engine wrote into a staged input into the caller's tensor."""
    for _, i in written:
        if bound[i] is not inputs[i]:
            inputs[i].copy_(bound[i])


def op_outputs(
    outputs: torch.Tensor | Sequence[torch.Tensor],
    inputs: Sequence[torch.Tensor],
    written: InPlaceOutputs,
) -> List[torch.Tensor]:
    """What the Python runtime's ``tensorrt::execute_engine`` returns: the engine's
    ``outputs`` (one tensor or a sequence) less those written into an input; the
    others are the engine's own memory (``custom_op`` refuses an alias of an input)."""
    del inputs  # kept for the op's call; the outputs are decided by ``written``
    tensors = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    return returned_outputs(tensors, written) if written else tensors


def engine_in_place_inputs(engine: torch.nn.Module) -> InPlaceOutputs:
    """``(output, input)`` positions an engine module writes in place; ``()`` if none.

    Read from binding names and ``aliased_io``: valid before deserialization, in
    any runtime.
    """
    aliased_io = getattr(engine, "aliased_io", None)
    if not aliased_io:
        return ()
    return in_place_outputs(
        engine.output_binding_names, engine.input_binding_names, aliased_io
    )
