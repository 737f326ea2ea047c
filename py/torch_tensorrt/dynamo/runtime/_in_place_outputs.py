"""Engine outputs written into an engine input, returned without a copy.

An output listed in an engine's ``aliased_io`` is bound to the memory of its
input (a KV cache, or a state an in-place plugin updates): the engine writes the
input in place. The C++ runtime's ``tensorrt::execute_engine`` returns that input
as the output. The Python runtime's is a ``torch.library.custom_op``, whose
outputs may not alias its inputs, so it returned a clone of the input instead: a
copy of the whole state on every call, which the write-back after the engine
then copied again.

The Python runtime's op now leaves those outputs out (:func:`op_outputs`; its
fake kernel uses :func:`returned_outputs`) and ``TorchTensorRTModule.forward`` puts the input
tensors back in their places (:func:`with_inputs_written_in_place`). An input
the engine had to stage (made contiguous, or moved to the engine's device)
receives the staged tensor's new value (:func:`copy_staged_inputs_back`), so the
tensor put back always holds what the engine wrote.
"""

from __future__ import annotations

import logging
from typing import List, Mapping, Optional, Sequence, Tuple, TypeVar

import torch

logger = logging.getLogger(__name__)

T = TypeVar("T")

# (output index, input index) pairs
InPlaceOutputs = Tuple[Tuple[int, int], ...]


def in_place_outputs(
    output_binding_names: Sequence[str],
    input_binding_names: Sequence[str],
    aliased_io: Mapping[str, Tuple[str, str]],
) -> InPlaceOutputs:
    """The outputs of an engine that are written into one of its inputs.

    ``aliased_io`` maps an output binding name to ``(input binding name, kind)``;
    every kind is bound to its input's memory by both runtimes.
    """
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

    ``inputs`` are the caller's tensors; ``bound`` (default: ``inputs``) the ones
    the engine received, a tensor moved to the engine's device in place of a
    caller's. A caller's tensor that was moved receives what the engine wrote.
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

    ``tensorrt::execute_engine`` (C++) returns the tensor it bound an aliased
    output to: a contiguous view of the caller's input, or a copy when that
    input was not contiguous or not on the device, which the caller's tensor
    then receives.
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
    """What the Python runtime's ``tensorrt::execute_engine`` returns.

    ``outputs`` are the engine's outputs (one tensor or a sequence). The ones
    written into an input are left out. Every other output is memory the engine
    allocated for it, never an input's: ``custom_op``'s own check (in C++, on
    every call) would refuse one that aliased an input, so nothing here looks at
    the inputs' storages.
    """
    del inputs  # kept for the op's call; the outputs are decided by ``written``
    tensors = [outputs] if isinstance(outputs, torch.Tensor) else list(outputs)
    return returned_outputs(tensors, written) if written else tensors


def engine_in_place_inputs(engine: torch.nn.Module) -> InPlaceOutputs:
    """``(output, input)`` positions an engine module writes in place; ``()`` if none.

    Read from the module's binding names and ``aliased_io``, so it holds before
    the engine is deserialized and for every runtime.
    """
    aliased_io = getattr(engine, "aliased_io", None)
    if not aliased_io:
        return ()
    return in_place_outputs(
        engine.output_binding_names, engine.input_binding_names, aliased_io
    )
