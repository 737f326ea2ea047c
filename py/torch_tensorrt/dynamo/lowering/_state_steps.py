"""The state steps of lowering, one order for every entry point: :func:`lower_states`.

Buffer lifting, the KV-cache veto on an input the model only clones (checked
again after lowering), then ``post_lowering``, which makes the state plan.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Dict, List, Tuple

import torch
from torch_tensorrt.dynamo._settings import CompilationSettings
from torch_tensorrt.dynamo.lowering._buffer_lifting import (
    assert_no_kv_alias_markers_survived,
    lift_mutated_buffers,
)
from torch_tensorrt.dynamo.lowering._kv_state_writes import (
    forbid_kv_writes_on_cloned_inputs,
)
from torch_tensorrt.dynamo.lowering.passes._aten_lowering_pass import post_lowering


@dataclass(frozen=True)
class LoweredStates:
    """A lowered graph and what its state steps found."""

    gm: torch.fx.GraphModule
    # (placeholder, buffer name, buffer tensor) of each lifted buffer, in input order
    lifted_buffers: List[Tuple[str, str, torch.Tensor]] = field(default_factory=list)
    # the lifted graph's meta before lowering (the user's input and output specs)
    lifted_meta: Dict[str, Any] = field(default_factory=dict)

    @property
    def copyback_buffers(self) -> List[str]:
        """The lifted buffers whose new value is a graph output the caller copies back."""
        return list(self.lifted_meta.get("_copyback_mutation_buffers", []))


def lower_states(
    gm: torch.fx.GraphModule,
    settings: CompilationSettings,
    *,
    lift_buffers: bool,
) -> LoweredStates:
    """Lower ``gm`` with its state steps, in the order every entry point runs them.

    ``lift_buffers``: lift the buffers the graph mutates into inputs (the graph
    of ``ExportedProgram.module()``; an AOT graph's buffers are inputs already).
    """
    lifted: List[Tuple[str, str, torch.Tensor]] = []
    if lift_buffers:
        gm, lifted = lift_mutated_buffers(gm, settings)
    lifted_meta = dict(gm.meta)
    # IKVCacheUpdateLayer writes its cache input's memory: never an input the
    # model only clones
    marked = forbid_kv_writes_on_cloned_inputs(gm, [p for p, _, _ in lifted])
    gm = post_lowering(gm, settings)
    # the markers ride on node.meta through every pass: one a pass dropped is
    # named here, not met as a wrong in-place write
    lowered = {node.name for node in gm.graph.nodes}
    assert_no_kv_alias_markers_survived(gm, [n for n in marked if n in lowered])
    return LoweredStates(gm, lifted, lifted_meta)
