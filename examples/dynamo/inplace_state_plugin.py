"""
.. _inplace_state_plugin:

Updating a Model State In Place with a TensorRT Plugin
======================================================

A model keeps a large state tensor and updates a small part of it on every call
with a custom Triton kernel. In PyTorch the kernel is a ``torch.library.custom_op``
that mutates its argument (``mutates_args=("state",)``) and returns ``None``. This
example turns it into a TensorRT QDP plugin that updates the state where it lives,
builds a serialized engine for a Python-free runtime, and runs that engine the way
a C++ caller does: reading the engine's alias map to bind the state.

Steps 1-2 (the kernel and the PyTorch op) run anywhere. Registering the plugin
and its converter (steps 3-4) needs the standard TensorRT flavour
(``tensorrt.plugin``; TensorRT-RTX has no Python plugins); building the engine
with the plugin (step 5) also needs its builder, and running it (step 6) a GPU.
Where a step cannot run, the example says so and why; without the plugin it builds
the same update written in PyTorch (with TensorRT-RTX even on a CPU) to show the
engine's I/O and alias map.
"""

import json
import os
import tempfile
from typing import Tuple, Union

import torch
import torch_tensorrt
from torch_tensorrt import ENABLED_FEATURES
from torch_tensorrt.dynamo import check_alias_map_against_engine, read_alias_map

HAVE_GPU = torch.cuda.is_available()
HAVE_QDP = ENABLED_FEATURES.qdp_plugin
ROW = 1024

# %%
# Step 1: The Triton kernel
# -------------------------
#
# Adds ``update[i]`` to row ``index[i]`` of the state. It reads ``state`` and writes
# ``out``: the plugin passes the same memory for both, so only the touched rows
# are read and written.

import triton
import triton.language as tl


@triton.jit
def scatter_add_rows(
    state_ptr, index_ptr, update_ptr, out_ptr, n_rows, ROW: tl.constexpr
):
    i = tl.program_id(0)
    if i < n_rows:
        cols = tl.arange(0, ROW)
        row = tl.load(index_ptr + i)
        values = tl.load(state_ptr + row * ROW + cols)
        values += tl.load(update_ptr + i * ROW + cols)
        tl.store(out_ptr + row * ROW + cols, values)


# %%
# Step 2: The PyTorch op, in place and returning ``None``
# -------------------------------------------------------


@torch.library.custom_op("example::scatter_add_", mutates_args=("state",))  # type: ignore[misc]
def scatter_add_(
    state: torch.Tensor, index: torch.Tensor, update: torch.Tensor
) -> None:
    if state.is_cuda:
        n = index.shape[0]
        scatter_add_rows[(n,)](state, index, update, state, n, ROW=ROW)
    else:
        state.index_add_(0, index, update)


@scatter_add_.register_fake
def _(state: torch.Tensor, index: torch.Tensor, update: torch.Tensor) -> None:
    return None


class StatefulModel(torch.nn.Module):
    def forward(
        self, state: torch.Tensor, index: torch.Tensor, update: torch.Tensor
    ) -> torch.Tensor:
        torch.ops.example.scatter_add_(state, index, update)
        return update.sum(dim=-1)


# %%
# Step 3: The TensorRT plugin
# ---------------------------
#
# A QDP plugin follows the op's schema: the tensor arguments are its inputs (matched
# by name), then **the op's returns, then one output per mutated argument**. The op
# returns nothing, so the plugin has one output, the new state, declared as an
# alias of the ``state`` input (``state.aliased()``): TensorRT's convention for an
# in-place update. The kernel is compiled ahead of time, so the engine runs without
# Python.

if HAVE_QDP:
    import tensorrt.plugin as trtp

    @trtp.register("example::scatter_add_")
    def _(
        state: trtp.TensorDesc, index: trtp.TensorDesc, update: trtp.TensorDesc
    ) -> Tuple[trtp.TensorDesc]:
        return (state.aliased(),)

    @trtp.aot_impl("example::scatter_add_")
    def _(
        state: trtp.TensorDesc,
        index: trtp.TensorDesc,
        update: trtp.TensorDesc,
        outputs: Tuple[trtp.TensorDesc],
        tactic: int,
    ) -> Tuple[
        Union[str, bytes], Union[str, bytes], trtp.KernelLaunchParams, trtp.SymExprs
    ]:
        src = triton.compiler.ASTSource(
            fn=scatter_add_rows,
            signature={
                "state_ptr": "*fp32",
                "index_ptr": "*i64",
                "update_ptr": "*fp32",
                "out_ptr": "*fp32",
                "n_rows": "i32",
            },
            constexprs={"ROW": ROW},
        )
        compiled = triton.compile(src)
        params = trtp.KernelLaunchParams()
        params.grid_x = index.shape_expr[0]
        params.block_x = compiled.metadata.num_warps * 32
        params.shared_mem = compiled.metadata.shared
        extra = trtp.SymIntExprs(1)
        extra[0] = trtp.SymInt32(index.shape_expr[0])
        return compiled.metadata.name, compiled.asm["ptx"], params, extra

    # %%
    # Step 4: The converter
    # ---------------------
    #
    # ``generate_plugin_converter`` derives the converter from the op's schema. It
    # checks the registered plugin against that layout and declares
    # ``requires_aliased_plugin_io``, so the builder's ``ALIASED_PLUGIN_IO_10_03``
    # preview feature is set for the engines that need it.

    torch_tensorrt.dynamo.conversion.plugins.generate_plugin_converter(
        "example::scatter_add_", use_aot_if_available=True
    )
else:
    print(
        "Steps 3-4 skipped: this TensorRT has no Python plugins (tensorrt.plugin; "
        "the standard TensorRT flavour has them, TensorRT-RTX does not)."
    )


class StatefulModelInPyTorch(torch.nn.Module):
    """The same update in PyTorch ops: what TensorRT-RTX can build on a CPU."""

    def forward(
        self, state: torch.Tensor, index: torch.Tensor, update: torch.Tensor
    ) -> torch.Tensor:
        state[index] = state[index] + update
        return update.sum(dim=-1)


# %%
# Step 5: Build the serialized engine and its alias map
# -----------------------------------------------------
#
# ``torch.export`` turns the in-place op into a functional call; Torch-TensorRT
# lowers it onto the op's converter. The new state leaves the engine as the output
# ``state_new``. ``alias_map_path`` writes which output carries which input's new
# value and how to apply it: ``"in_place"`` (bind the output to the input's
# address; the plugin writes the state where it lives) or ``"copy"`` (copy the
# output into the input after each run).


def build(module: torch.nn.Module, args: Tuple[torch.Tensor, ...], out_dir: str):  # type: ignore[no-untyped-def]
    exported = torch.export.export(module, args)
    engine = torch_tensorrt.dynamo.convert_exported_program_to_serialized_trt_engine(
        exported,
        arg_inputs=list(args),
        min_block_size=1,
        require_full_compilation=True,
        alias_map_path=os.path.join(out_dir, "model.aliases.json"),
    )
    with open(os.path.join(out_dir, "model.engine"), "wb") as f:
        f.write(engine)
    # read and checked: an unknown version, a typo, two outputs on one input fail
    aliases = read_alias_map(os.path.join(out_dir, "model.aliases.json"))
    return engine, aliases


# %%
# Step 6: Run the serialized engine as a C++ caller would
# -------------------------------------------------------
#
# Only TensorRT's runtime is used. Every I/O tensor gets an address; an output the
# alias map marks ``in_place`` gets its input's address, so no run copies the
# state; a ``copy`` output gets memory of its own and is copied back after the run.


def run(engine_bytes: bytes, aliases, state, index, update, steps: int = 3):  # type: ignore[no-untyped-def]
    import tensorrt as trt

    runtime = trt.Runtime(trt.Logger(trt.Logger.WARNING))
    runtime.engine_host_code_allowed = True  # the AOT plugin's kernel
    engine = runtime.deserialize_cuda_engine(engine_bytes)
    # the map fits this engine: names, dtypes and shapes, TensorRT's own aliases
    check_alias_map_against_engine(aliases, engine)
    context = engine.create_execution_context()
    buffers = {"state": state, "index": index, "update": update}
    buffers["output0"] = torch.empty(index.shape[0], device="cuda")
    in_place = {a.output: a.input for a in aliases if a.update == "in_place"}
    copies = []
    for a in aliases:
        if a.update == "in_place":
            buffers[a.output] = buffers[a.input]
        else:
            buffers[a.output] = torch.empty_like(buffers[a.input])
            copies.append((buffers[a.input], buffers[a.output]))
    for name, tensor in buffers.items():
        assert context.set_tensor_address(name, tensor.data_ptr()), name
    stream = torch.cuda.Stream()
    for _ in range(steps):
        assert context.execute_async_v3(stream.cuda_stream)
        with torch.cuda.stream(stream):
            for dst, src in copies:
                dst.copy_(src)
    stream.synchronize()
    return in_place


if __name__ == "__main__":
    rows = 4096  # a 16 MiB fp32 state; each call updates 0.1% of its rows
    device = "cuda" if HAVE_GPU else "cpu"
    state = torch.zeros(rows, ROW, device=device)
    index = torch.randperm(rows, device=device)[: rows // 1000]
    update = torch.ones(index.shape[0], ROW, device=device)
    with tempfile.TemporaryDirectory() as out_dir:
        if HAVE_QDP and HAVE_GPU:
            engine, aliases = build(StatefulModel(), (state, index, update), out_dir)
        elif ENABLED_FEATURES.tensorrt_rtx and not HAVE_GPU:
            print(
                "Step 5 with the plugin skipped: it needs the standard TensorRT "
                "flavour's builder and a GPU. Building the same update written in "
                "PyTorch with TensorRT-RTX on the CPU instead."
            )
            engine, aliases = build(
                StatefulModelInPyTorch(), (state, index, update), out_dir
            )
        else:
            engine, aliases = None, []
            print("Step 5 skipped: no TensorRT builder can build this engine here.")
        if engine is not None:
            print(f"Built a serialized engine of {len(engine)} bytes; alias map:")
            with open(os.path.join(out_dir, "model.aliases.json")) as f:
                print(json.dumps(json.load(f)["aliases"], indent=2))
        if engine is not None and HAVE_GPU:
            expected = state.clone().index_add_(0, index, update * 3)
            in_place = run(engine, aliases, state, index, update)
            assert torch.equal(state, expected)
            print(f"Ran 3 calls; updated in place: {sorted(in_place) or 'nothing'}")
        else:
            print("Step 6 skipped: running a TensorRT engine needs a GPU.")
