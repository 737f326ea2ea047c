"""A standalone engine's input mutations become engine outputs, and its alias map.

``ExportedProgram.module()`` writes a graph input back with a trailing
``aten.copy_(input, new_value)``; a standalone engine has no PyTorch around it,
so the new value of input binding ``X`` leaves it as output ``X_new`` (or as the
model's own output that returns it), for the caller to copy back or bind in
place. :func:`alias_map` / :func:`write_alias_map` say which, as JSON.
"""

from __future__ import annotations

import json
import logging
import os
import secrets
import stat
from dataclasses import dataclass, fields, replace
from typing import Any, Dict, List, Mapping, Optional, Sequence, Tuple

import torch
from torch_tensorrt.dynamo._argument_checks import described, expect
from torch_tensorrt.dynamo.conversion._functionalized_op import is_write_back
from torch_tensorrt.dynamo.lowering._state_plan import STATE_PLAN

logger = logging.getLogger(__name__)

WRITE_BACK_SUFFIX = "_new"
ALIAS_MAP_FORMAT = "torch_tensorrt.engine_io_aliases"
ALIAS_MAP_VERSION = 2


@dataclass(frozen=True)
class WriteBack:
    """Engine output ``output`` holds the new value of input ``input``.

    ``update``: ``"copy"`` (the caller copies the output into the input) or
    ``"in_place"`` (bound to the input's address); ``binding`` says who makes an
    in-place alias: ``"engine"`` (``IKVCacheUpdateLayer``) or ``"declared_alias"``
    (a plugin). :func:`expose_write_backs` predicts ``in_place`` from the state
    plan; :func:`network_in_place_updates` sets it from the built network.
    """

    input: str
    output: str
    update: str = "copy"
    binding: Optional[str] = None
    # ``binding: engine`` only: the caller's tensor's shape, and the shape the
    # engine's input and output have (the same memory seen in the form
    # IKVCacheUpdateLayer takes); -1 for a dynamic dimension
    state_shape: Optional[List[int]] = None
    binding_shape: Optional[List[int]] = None
    # ``copy`` only: why the engine does not write the state in place
    reason: Optional[str] = None


def expose_write_backs(
    gm: torch.fx.GraphModule,
    input_binding_names: Optional[Sequence[str]] = None,
    output_binding_names: Optional[Sequence[str]] = None,
    state_inputs: Sequence[str] = (),
) -> List[WriteBack]:
    """Turn every ``copy_`` write-back of a graph input into a graph output.

    ``state_inputs`` name the inputs whose new values are already the last graph
    outputs (lifted buffers copied back); ``None`` outputs are dropped. Returns a
    :class:`WriteBack` per state and leaves every output binding name in
    ``gm.meta["_output_binding_names"]``. Raises for a write a standalone engine
    cannot express (an unlifted buffer, or anything but a graph input).
    """
    placeholders = [n for n in gm.graph.nodes if n.op == "placeholder"]
    input_names = (
        list(input_binding_names)
        if input_binding_names is not None
        else [n.name for n in placeholders]
    )
    name_of_input = dict(zip(placeholders, input_names))

    # An engine's outputs are flat, aliased ones appended after the graph's own:
    # the model's output spec would not match them
    codegen = gm.graph._codegen
    if isinstance(codegen, torch.fx.graph._PyTreeCodeGen):
        codegen.pytree_info = codegen.pytree_info._replace(out_spec=None)
        gm.recompile()

    output_node = next(n for n in gm.graph.nodes if n.op == "output")
    outputs = list(output_node.args[0])
    write_backs = [n for n in gm.graph.nodes if is_write_back(n)]
    _refuse_unlifted_buffer_writes(write_backs)
    if not write_backs and not state_inputs and all(o is not None for o in outputs):
        gm.meta["_output_binding_names"] = output_binding_names
        return []
    state_values = outputs[len(outputs) - len(state_inputs) :]
    outputs = outputs[: len(outputs) - len(state_inputs)]

    # A write-back that is itself returned returns the input, i.e. its new value.
    user_outputs = [
        o.args[1] if isinstance(o, torch.fx.Node) and is_write_back(o) else o
        for o in outputs
    ]
    kept = [i for i, o in enumerate(user_outputs) if o is not None]
    new_outputs = [user_outputs[i] for i in kept]
    if output_binding_names is not None:
        names = [output_binding_names[i] for i in kept]
    else:
        names = [f"output{i}" for i in range(len(new_outputs))]

    result = []

    input_of_name = {name: node for node, name in name_of_input.items()}

    output_of: Dict[Any, str] = {}
    for value, name in zip(new_outputs, names):
        output_of.setdefault(value, name)
    taken = set(names) | set(input_names)

    def output_for(input_name: str, value: torch.fx.Node) -> WriteBack:
        """The output carrying ``value``: the model's own when it returns it."""
        if value in output_of:
            output_name = output_of[value]
        else:
            output_name = input_name + WRITE_BACK_SUFFIX
            if output_name in taken:
                raise RuntimeError(
                    f"Binding name '{output_name}' for the new value of input "
                    f"'{input_name}' is already used; rename that input or output"
                )
            new_outputs.append(value)
            names.append(output_name)
            output_of[value] = output_name
            taken.add(output_name)
        # predicted from the state plan; only the built network proves it
        row = input_of_name[input_name].meta.get(STATE_PLAN)
        in_place = row is not None and row.in_place and row.by_its_op
        return WriteBack(input_name, output_name, "in_place" if in_place else "copy")

    for input_name, value in zip(state_inputs, state_values):
        result.append(output_for(input_name, value))
    for node in write_backs:
        target, value = node.args[0], node.args[1]
        if not isinstance(target, torch.fx.Node) or target.op != "placeholder":
            raise RuntimeError(_unexpressible_write(node, name_of_input))
        result.append(output_for(name_of_input[target], value))
        node.replace_all_uses_with(target)
        gm.graph.erase_node(node)

    output_node.args = (tuple(new_outputs),)
    gm.graph.lint()
    gm.recompile()
    gm.meta["_output_binding_names"] = names
    carried = ", ".join(f"{w.output} -> {w.input} ({w.update})" for w in result)
    logger.info(f"Engine outputs carrying input mutations: {carried}")
    return result


def _refuse_unlifted_buffer_writes(write_backs: Sequence[torch.fx.Node]) -> None:
    """Raise for a buffer the graph writes that is not an engine input.

    Without ``lift_mutable_buffers=True`` such a buffer is a constant of the
    engine: the engine would use its new value within a run and lose it after
    each run, where the model keeps it.
    """
    buffers = sorted(
        {
            str(node.args[0].target)
            for node in write_backs
            if isinstance(node.args[0], torch.fx.Node) and node.args[0].op == "get_attr"
        }
    )
    if buffers:
        raise ValueError(
            "convert_exported_program_to_serialized_trt_engine: the model writes "
            f"buffer(s) {buffers}, which an engine built without "
            "lift_mutable_buffers=True holds as constants and would not keep "
            "between runs: pass lift_mutable_buffers=True, and the engine takes "
            "each as an input and returns its new value, as the alias map says."
        )


def _unexpressible_write(
    write_back: torch.fx.Node, name_of_input: Mapping[torch.fx.Node, str]
) -> str:
    """Why a standalone engine cannot carry ``write_back``, in the user's terms."""
    target = write_back.args[0]
    root, through = target, []
    while (
        isinstance(root, torch.fx.Node)
        and root.op == "call_function"
        and root.args
        and isinstance(root.args[0], torch.fx.Node)
    ):
        through.append(root)
        root = root.args[0]
    if isinstance(root, torch.fx.Node) and root in name_of_input:
        name = name_of_input[root]
        if any(
            n.target in (torch.ops.aten.view_as_complex.default, torch.view_as_complex)
            for n in through
        ):
            # the complex lowering renames the input it unpacks
            name = name.removesuffix("_unpacked_complex")
            return (
                f"The model writes its complex input '{name}' in place. TensorRT has no "
                "complex tensors, so the engine takes that input as pairs of real "
                "numbers and a standalone engine cannot write it back: keep the state "
                f"real in the model (torch.view_as_real({name}), a trailing dimension "
                "of 2) and write that."
            )
        return (
            f"The model writes part of its input '{name}' in place through "
            f"{', '.join(str(n.target) for n in reversed(through))}, which a "
            "standalone engine cannot express: write the whole input (e.g. "
            f"{name}.copy_(new_value)) or a slice of it."
        )
    return (
        f"The graph writes a new value into '{target}' ({write_back.format_node()}), "
        "which is not an input of the engine: a serialized engine cannot "
        "express that mutation."
    )


def network_in_place_updates(
    write_backs: Sequence[WriteBack],
    aliased_io: Mapping[str, Tuple[str, str]],
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> List[WriteBack]:
    """``write_backs`` with ``in_place`` exactly where the built network proves it.

    An output ``aliased_io`` maps to its write-back's input is ``in_place``:
    ``declared_alias`` for a plugin converter's record (kind ``user``), ``engine``
    for TensorRT's own alias (``IKVCacheUpdateLayer``), listed also without a
    write-back. A predicted ``in_place`` the network does not prove is copied
    back, with a warning.
    """
    result = []
    for w in write_backs:
        alias = aliased_io.get(w.output)
        if alias is not None and alias[0] == w.input:
            binding = "declared_alias" if alias[1] == "user" else "engine"
            result.append(replace(w, update="in_place", binding=binding))
            continue
        if w.update == "in_place":
            logger.warning(
                f"Input '{w.input}' is not updated in place: no plugin layer of "
                f"the engine writes it in place as output '{w.output}' (the "
                "converter of its writer declares requires_aliased_plugin_io but "
                "recorded no in-place plugin output). Its new value is copied back "
                f"from '{w.output}' instead."
            )
        result.append(replace(w, update="copy", binding=None))
    # Every other alias TensorRT makes: it refuses to run with the output bound
    # anywhere but its input, so a caller must know it
    covered = {w.output for w in result}
    for output_name, (input_name, kind) in aliased_io.items():
        if kind != "user" and output_name not in covered:
            result.append(WriteBack(input_name, output_name, "in_place", "engine"))
    _check_against_the_network(result, input_names, output_names)
    return result


def _check_against_the_network(
    updates: Sequence[WriteBack],
    input_names: Sequence[str],
    output_names: Sequence[str],
) -> None:
    """Raise where an update names a tensor the engine lacks, or a state twice."""
    problems = []
    seen: Dict[str, str] = {}
    for w in updates:
        if w.input not in input_names:
            problems.append(f"'{w.input}' is not an input of the engine")
        if w.output not in output_names:
            problems.append(f"'{w.output}' is not an output of the engine")
        if w.input in seen:
            problems.append(
                f"input '{w.input}' has two entries ('{seen[w.input]}' and "
                f"'{w.output}')"
            )
        seen[w.input] = w.output
    if problems:
        raise RuntimeError(
            "The engine's state outputs disagree with its alias map: "
            + "; ".join(problems)
            + ". This is a bug in Torch-TensorRT's state handling, please report it "
            "with the model"
        )


def with_state_details(
    write_backs: Sequence[WriteBack],
    shapes: Mapping[str, Tuple[List[int], List[int]]],
    reasons: Mapping[str, str],
) -> List[WriteBack]:
    """``write_backs`` with, by input binding, the caller's and the engine's shape
    of each engine-bound state (``declare_state_views``) and why each copy is one."""
    result = []
    for w in write_backs:
        if w.binding == "engine" and w.input in shapes:
            state_shape, binding_shape = shapes[w.input]
            w = replace(w, state_shape=state_shape, binding_shape=binding_shape)
        if w.update == "copy":
            w = replace(w, reason=reasons.get(w.input))
        result.append(w)
    return result


def alias_map(
    write_backs: Sequence[WriteBack], input_dtypes: Optional[Mapping[str, str]] = None
) -> Dict[str, Any]:
    """The JSON alias map of ``write_backs`` (its format: :func:`read_alias_map`).

    ``copy``: after each run, copy the output into the input (never bound to the
    same memory). ``in_place``: bind the output to the input's address; with
    ``binding: engine`` TensorRT reports the alias itself and refuses to run with
    the output bound elsewhere, and ``binding_shape`` is the shape to bind the
    state's memory with. ``inputs``: each input's dtype as the caller has it (a
    float64 state is a float32 engine input: the caller converts it both ways).
    """
    entries = []
    for w in write_backs:
        entry: Dict[str, Any] = {
            "output": w.output,
            "input": w.input,
            "update": w.update,
        }
        if w.update == "in_place":
            entry["binding"] = w.binding or "declared_alias"
        if w.state_shape is not None:
            entry["state_shape"] = list(w.state_shape)
            entry["binding_shape"] = list(w.binding_shape or w.state_shape)
        if w.reason is not None:
            entry["reason"] = w.reason
        entries.append(entry)
    result = {
        "format": ALIAS_MAP_FORMAT,
        "version": ALIAS_MAP_VERSION,
        "aliases": entries,
    }
    if input_dtypes is not None:
        result["inputs"] = dict(input_dtypes)
    return result


UPDATES = ("copy", "in_place")
BINDINGS = ("engine", "declared_alias")
_MAP_KEYS = ("format", "version", "aliases", "inputs")
_ENTRY_KEYS = tuple(f.name for f in fields(WriteBack))


class AliasMapError(ValueError):
    """An alias map that is not one this version writes, or does not fit its engine."""


def _shape_field(where: str, entry: Mapping[str, Any], key: str) -> Optional[List[int]]:
    value = entry.get(key)
    if value is None:
        return None
    if not (
        isinstance(value, list)
        and all(isinstance(d, int) and not isinstance(d, bool) for d in value)
        and all(d >= -1 for d in value)
    ):
        raise AliasMapError(
            f"{where}: '{key}' is {value!r}; expected a list of dimensions "
            "(ints, -1 for a dynamic one)"
        )
    return list(value)


def _entry(i: int, entry: Any) -> WriteBack:
    """One entry of the ``"aliases"`` list, checked (see :func:`read_alias_map`)."""
    where = f"alias map entry {i}"
    if not isinstance(entry, Mapping):
        raise AliasMapError(f"{where} is {entry!r}; expected an object")
    unknown = sorted(set(entry) - set(_ENTRY_KEYS))
    if unknown:
        raise AliasMapError(
            f"{where} has unknown key(s) {unknown}; expected {list(_ENTRY_KEYS)}"
        )
    for key in ("output", "input", "update"):
        if not isinstance(entry.get(key), str) or not entry[key]:
            raise AliasMapError(f"{where}: '{key}' is missing or not a name")
    update, binding = entry["update"], entry.get("binding")
    if update not in UPDATES:
        raise AliasMapError(f"{where}: update {update!r} is not one of {list(UPDATES)}")
    if update == "in_place" and binding not in BINDINGS:
        raise AliasMapError(
            f"{where}: an in_place update needs a binding, one of {list(BINDINGS)}; "
            f"got {binding!r}"
        )
    if update == "copy" and binding is not None:
        raise AliasMapError(f"{where}: a copy has no binding (got {binding!r})")
    if update == "copy" and entry["output"] == entry["input"]:
        raise AliasMapError(
            f"{where}: output '{entry['output']}' is copied into itself; a copy "
            "output has memory of its own"
        )
    state_shape = _shape_field(where, entry, "state_shape")
    binding_shape = _shape_field(where, entry, "binding_shape")
    if (state_shape is None) != (binding_shape is None) or (
        state_shape is not None and binding != "engine"
    ):
        raise AliasMapError(
            f"{where}: 'state_shape' and 'binding_shape' go together, on a "
            "'binding': 'engine' entry only"
        )
    reason = entry.get("reason")
    if reason is not None and not (isinstance(reason, str) and update == "copy"):
        raise AliasMapError(
            f"{where}: 'reason' is {reason!r}; expected a sentence, on a copy only"
        )
    return WriteBack(
        entry["input"],
        entry["output"],
        update,
        binding,
        state_shape,
        binding_shape,
        reason,
    )


def alias_map_entries(aliases: Any) -> List[WriteBack]:
    """The ``"aliases"`` list of a map, each entry and the whole list checked.

    Besides each entry (:func:`read_alias_map`): an output appears once, and an
    input has at most one ``in_place`` output (the memory of one tensor cannot
    hold two engine outputs).
    """
    if not isinstance(aliases, list):
        raise AliasMapError(f"'aliases' is {aliases!r}; expected a list")
    entries = [_entry(i, e) for i, e in enumerate(aliases)]
    outputs: Dict[str, int] = {}
    in_place: Dict[str, str] = {}
    for i, w in enumerate(entries):
        if w.output in outputs:
            raise AliasMapError(
                f"alias map entries {outputs[w.output]} and {i} both give output "
                f"'{w.output}'"
            )
        outputs[w.output] = i
        if w.update == "in_place":
            if w.input in in_place:
                raise AliasMapError(
                    f"outputs '{in_place[w.input]}' and '{w.output}' are both "
                    f"bound in place to input '{w.input}'"
                )
            in_place[w.input] = w.output
    return entries


def read_alias_map(source: Any) -> List[WriteBack]:
    """Read and check an alias map: a path to its JSON, or the JSON already loaded.

    The format (version 2) is an object ``{"format":
    "torch_tensorrt.engine_io_aliases", "version": 2, "aliases": [...]}`` whose
    entries are :class:`WriteBack` s: ``"output"``, ``"input"`` (binding names),
    ``"update"`` (``"copy"`` or ``"in_place"``), ``"binding"`` (``in_place``
    only: ``"engine"`` or ``"declared_alias"``), and for
    ``"binding": "engine"`` ``"state_shape"`` and ``"binding_shape"`` (lists of
    dimensions, ``-1`` dynamic); optional: on a ``copy`` ``"reason"``, and beside
    ``"aliases"`` ``"inputs"``, each engine input's dtype by binding name, the
    inputs of the entries among them. Any other format or version, key, value or type
    is an :class:`AliasMapError` naming the entry and what was expected. Check
    the map against its engine with :func:`check_alias_map_against_engine`.
    """
    if not isinstance(source, (str, os.PathLike)):
        return _alias_map_entries(source)
    try:
        with open(source, encoding="utf-8") as f:
            text = f.read()
    except OSError as e:
        raise AliasMapError(
            f"read_alias_map: cannot read the alias map '{source}' "
            f"({e.strerror or e}); give the path that alias_map_path wrote"
        ) from None
    except UnicodeDecodeError:
        raise AliasMapError(
            f"read_alias_map: '{source}' is not text, so not an alias map (an engine "
            "file?); give the JSON file that alias_map_path wrote"
        ) from None
    try:
        loaded = json.loads(text)
    except json.JSONDecodeError as e:
        raise AliasMapError(
            f"read_alias_map: '{source}' is not JSON ({e.msg}: line {e.lineno}, "
            f"column {e.colno}; cut short?); build the engine again with "
            "alias_map_path to write it"
        ) from None
    try:
        return _alias_map_entries(loaded)
    except AliasMapError as e:  # the file's name first, then what is wrong in it
        what = str(e).removeprefix("read_alias_map: ")
        raise AliasMapError(f"read_alias_map: '{source}': {what}") from None


def _alias_map_entries(source: Any) -> List[WriteBack]:
    """The checked entries of an alias map already loaded (:func:`read_alias_map`)."""
    if not isinstance(source, Mapping):
        raise AliasMapError(
            f"read_alias_map: the alias map is {described(source)}; expected the "
            "path of its JSON file, or that JSON loaded as a dict"
        )
    unknown = sorted(set(source) - set(_MAP_KEYS))
    if unknown:
        raise AliasMapError(
            f"alias map has unknown key(s) {unknown}; expected only {list(_MAP_KEYS)}"
        )
    if source.get("format") != ALIAS_MAP_FORMAT:
        raise AliasMapError(
            f"alias map format is {source.get('format')!r}; expected "
            f"{ALIAS_MAP_FORMAT!r}"
        )
    if source.get("version") != ALIAS_MAP_VERSION:
        raise AliasMapError(
            f"alias map version is {source.get('version')!r}; this Torch-TensorRT "
            f"reads version {ALIAS_MAP_VERSION}"
        )
    entries = alias_map_entries(source.get("aliases"))
    _check_input_dtypes(source.get("inputs"), entries)
    return entries


def _check_input_dtypes(dtypes: Any, entries: Sequence[WriteBack]) -> None:
    """The ``"inputs"`` of a map: dtype names by binding name, every entry's input listed."""
    if dtypes is None:
        return
    if not (
        isinstance(dtypes, Mapping)
        and all(isinstance(k, str) and k for k in dtypes)
        and all(isinstance(v, str) and v for v in dtypes.values())
    ):
        raise AliasMapError(
            f"'inputs' is {dtypes!r}; expected an object of binding names and "
            "their dtypes' names"
        )
    missing = [w.input for w in entries if w.input not in dtypes]
    if missing:
        raise AliasMapError(f"'inputs' does not give the dtype of input(s) {missing}")


def _entries_argument(function: str, argument: str, entries: Any) -> List[WriteBack]:
    """The entries a caller hands a checker: :func:`read_alias_map`'s, or the raw list."""
    if isinstance(entries, (list, tuple)):
        entries = list(entries)
        if all(isinstance(w, WriteBack) for w in entries):
            return entries
        return alias_map_entries(entries)
    raise TypeError(
        f"{function}: argument '{argument}' is {described(entries)}; expected the "
        "entries read_alias_map returns (or the map's 'aliases' list): pass "
        "read_alias_map(path) for the map's file."
    )


def check_alias_map_against_engine(entries: Sequence[WriteBack], engine: Any) -> None:
    """Raise :class:`AliasMapError` where the map does not fit ``engine``.

    ``entries`` are what :func:`read_alias_map` returns (or the map's raw
    ``"aliases"`` list); ``engine`` is the deserialized ``ICudaEngine``. Any
    other argument is a ``TypeError`` saying what to pass. Each entry's input
    must be an engine input and its output an engine output; an ``in_place`` output has its
    input's dtype and shape (the same bytes); a ``binding: engine`` output is the
    one TensorRT reports aliased to that input (``get_aliased_input_tensor``) and
    the input has the map's ``binding_shape``. Every output TensorRT aliases to an
    input must be in the map, ``in_place``.
    """
    entries = _entries_argument("check_alias_map_against_engine", "entries", entries)
    if not hasattr(engine, "num_io_tensors"):
        raise TypeError(
            f"check_alias_map_against_engine: argument 'engine' is "
            f"{described(engine)}; expected a deserialized TensorRT ICudaEngine: "
            "pass trt.Runtime(trt.Logger()).deserialize_cuda_engine(engine_bytes)."
        )
    names = [engine.get_tensor_name(i) for i in range(engine.num_io_tensors)]
    modes = {n: str(engine.get_tensor_mode(n)).rsplit(".", 1)[-1] for n in names}
    listed = {w.output: w for w in entries}
    for w in entries:
        for name, mode in ((w.input, "INPUT"), (w.output, "OUTPUT")):
            if modes.get(name) != mode:
                raise AliasMapError(
                    f"alias map: '{name}' is not an {mode.lower()} of the engine "
                    f"(its I/O tensors: {names})"
                )
        if w.update != "in_place":
            continue
        shapes = [list(engine.get_tensor_shape(n)) for n in (w.input, w.output)]
        dtypes = [engine.get_tensor_dtype(n) for n in (w.input, w.output)]
        if dtypes[0] != dtypes[1] or shapes[0] != shapes[1]:
            raise AliasMapError(
                f"alias map: output '{w.output}' ({dtypes[1]}, {shapes[1]}) is "
                f"bound in place to input '{w.input}' ({dtypes[0]}, {shapes[0]}); "
                "they must have the same dtype and shape"
            )
        if w.binding == "engine":
            aliased = engine.get_aliased_input_tensor(w.output)
            if aliased != w.input:
                raise AliasMapError(
                    f"alias map: output '{w.output}' is bound in place to "
                    f"'{w.input}' by the engine, but the engine aliases it to "
                    f"{aliased!r}"
                )
            if w.binding_shape is not None and w.binding_shape != shapes[0]:
                raise AliasMapError(
                    f"alias map: input '{w.input}' has binding_shape "
                    f"{w.binding_shape}, but the engine's is {shapes[0]}"
                )
    for name in names:
        if modes[name] != "OUTPUT":
            continue
        aliased = engine.get_aliased_input_tensor(name)
        if aliased and (name not in listed or listed[name].update != "in_place"):
            raise AliasMapError(
                f"alias map: the engine writes output '{name}' into input "
                f"'{aliased}' in place, and the map does not bind it in place"
            )


def check_in_place_bindings(
    aliases: Sequence[Mapping[str, Any]], addresses: Mapping[str, int]
) -> None:
    """Raise if an output the alias map binds in place is bound elsewhere.

    ``aliases``: the map's ``"aliases"`` list or what :func:`read_alias_map`
    returns (checked first: a bad entry is an :class:`AliasMapError`);
    ``addresses``: the device address bound to each engine I/O tensor by name (as
    given to ``IExecutionContext.set_tensor_address``). ``engine`` outputs must
    share their input's memory; ``declared_alias`` ones should.
    """
    if not isinstance(addresses, Mapping):
        raise TypeError(
            f"check_in_place_bindings: argument 'addresses' is "
            f"{described(addresses)}; expected a dict of each engine tensor's name "
            "to the device address bound to it."
        )
    for entry in _entries_argument("check_in_place_bindings", "aliases", aliases):
        if entry.update != "in_place":
            continue
        output, state = entry.output, entry.input
        for name in (output, state):
            if name not in addresses:
                raise ValueError(
                    f"Engine tensor '{name}' has no bound address; the alias map "
                    f"binds output '{output}' to input '{state}' in place"
                )
        if addresses[output] != addresses[state]:
            binding = entry.binding
            raise ValueError(
                f"Engine output '{output}' is bound to 0x{addresses[output]:x}, but "
                f"the alias map says it updates input '{state}' in place "
                f"({binding}): bind it to the input's address 0x{addresses[state]:x}"
                + (
                    "; TensorRT refuses to run the engine bound this way"
                    if binding == "engine"
                    else ""
                )
            )


def _kind_of(path: str) -> str:
    mode = os.lstat(path).st_mode
    for test, kind in (
        (stat.S_ISLNK, "symbolic link"),
        (stat.S_ISDIR, "directory"),
        (stat.S_ISCHR, "character device"),
        (stat.S_ISBLK, "block device"),
        (stat.S_ISFIFO, "named pipe"),
        (stat.S_ISSOCK, "socket"),
    ):
        if test(mode):
            return kind
    return "special file"


def check_alias_map_path(path: str) -> str:
    """``path`` made absolute, once it is known the alias map can replace it there.

    Raises ``TypeError`` for anything but a path, ``ValueError`` for anything but
    a regular file (or nothing), ``FileNotFoundError`` for a missing directory and
    ``PermissionError`` for one not writable, each naming the path.
    """
    expect(
        "convert_exported_program_to_serialized_trt_engine",
        "alias_map_path",
        path,
        (str, os.PathLike),
        "a path (str or os.PathLike)",
        "give the file the JSON alias map is written to, e.g. 'model.aliases.json'",
    )
    absolute = os.path.abspath(path)
    if os.path.lexists(absolute) and (
        os.path.islink(absolute) or not os.path.isfile(absolute)
    ):
        raise ValueError(
            f"alias_map_path '{path}' is a {_kind_of(absolute)}, not a regular file: "
            "the alias map replaces only a regular file; give the path of a file"
        )
    directory = os.path.dirname(absolute)
    if not os.path.isdir(directory):
        raise FileNotFoundError(
            f"alias_map_path '{path}': the directory '{directory}' does not exist; "
            "create it, or give a path in an existing directory"
        )
    if not os.access(directory, os.W_OK | os.X_OK):
        raise PermissionError(
            f"alias_map_path '{path}': the directory '{directory}' is not writable"
        )
    return absolute


def _new_file_beside(path: str) -> Tuple[int, str]:
    """A new file beside ``path``, open for writing: ``(fd, its path)``; mode
    ``0o666`` less the umask, as ``open`` gives (``tempfile.mkstemp`` gives 0o600)."""
    flags = os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0)
    while True:
        name = os.path.join(
            os.path.dirname(path), f".alias-map-{secrets.token_hex(8)}.json"
        )
        try:
            return os.open(name, flags, 0o666), name
        except FileExistsError:
            continue


def write_alias_map(
    path: str,
    write_backs: Sequence[WriteBack],
    input_dtypes: Optional[Mapping[str, str]] = None,
) -> None:
    """Write :func:`alias_map` as JSON to ``path`` atomically (a new file beside it
    replaces it), with the mode ``open`` gives a new file under the umask."""
    absolute = check_alias_map_path(path)
    fd, tmp = _new_file_beside(absolute)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as f:
            json.dump(alias_map(write_backs, input_dtypes), f, indent=2)
            f.write("\n")
        check_alias_map_path(path)  # nothing else was put there meanwhile
        os.replace(tmp, absolute)
    finally:
        if os.path.exists(tmp):
            os.unlink(tmp)
