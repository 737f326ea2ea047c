"""Every TensorRT name the project's code uses exists in the real TensorRT 11.1.

What is real here: the TensorRT 11.1.0.106 Python bindings (``tensorrt``) and QDP
(``tensorrt.plugin``) installed in the "standard" test environment. This CPU-only
machine has no builder (``trt.Builder()`` fails), so no network, builder config,
engine or execution context is created: every name is checked with ``hasattr`` on
the real modules and classes (QDP's pure-Python classes also against the instance
attributes their source assigns to ``self``), and keyword arguments against the
parameter names of the real pybind docstring signatures (``inspect.signature`` for
QDP's Python functions); a keyword is not checked when the docstring states no
signature.

Project code: the added (``+``) lines of ``patches/*.patch``, every ``.py`` under
``py/`` and ``tests/py/``, and ``tools/bench/*.py``. Patch lines are fragments that
do not parse as Python, so one small scanner reads all of them: comments and string
literals (f-strings included) blanked, scopes from indentation, names from regular
expressions. A hunk's context lines help to attribute names; only names on added
lines are reported.

What is checked:

1. attribute chains on the TensorRT modules (``trt.X.Y``, ``tensorrt.X``,
   ``trtp.X``) where the name is bound by an import of ``tensorrt`` (not where it is
   rebound, as in a test's ``trt = self._compile(...)``), and every name of
   ``from tensorrt... import A, B``; in patches ``trt``, ``tensorrt`` and ``trtp``
   are upstream's module aliases;
2. attributes and methods used on TensorRT objects whose receiver can be
   attributed: the receivers in ``NAMED_RECEIVERS``, and names (``self.X``: in the
   same class) bound in the same scope by a constructor of a real class
   (``trt.Runtime(...)``, ``TensorDesc()``), by a ``trt.X``/``trtp.X`` annotation,
   or by a call whose real docstring or annotation states the class it returns
   (``runtime.deserialize_cuda_engine(...)``: ``ICudaEngine``;
   ``engine.create_execution_context()``: ``IExecutionContext``;
   ``ctx.net.add_plugin(...)``: ``IPluginV3Layer``). Other receivers are ignored,
   not guessed;
3. the keyword arguments of calls to the names of 1 and 2.

A name that exists only in TensorRT-RTX or only in a newer TensorRT is reported like
a misspelling; ``ALLOWED_MISSING`` lists the few the code uses behind ``hasattr``.
"""

import ast
import bisect
import functools
import importlib
import inspect
import keyword
import re
import textwrap
import warnings
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Dict, List, Optional, Sequence, Set, Tuple

import pytest

REPO = Path(__file__).resolve().parents[2]


def _real_tensorrt() -> Tuple[Any, Optional[str]]:
    try:
        import tensorrt
    except Exception as error:  # ImportError, or a broken installation
        return None, (
            f"The TensorRT Python bindings cannot be imported ({error}), so there is "
            "nothing to check the project's TensorRT names against."
        )
    version = str(getattr(tensorrt, "__version__", "unknown"))
    location = str(getattr(tensorrt, "__file__", ""))
    if not version.startswith("11.1.") or "rtx" in location.lower():
        return None, (
            "This test checks names against the standard-flavour TensorRT 11.1 "
            f"bindings, but `import tensorrt` gives version {version} from {location}."
        )
    try:
        import tensorrt.plugin  # noqa: F401
    except Exception as error:
        return None, (
            f"TensorRT {version} imports but its QDP module tensorrt.plugin does not "
            f"({error}), so the plugin names cannot be checked."
        )
    return tensorrt, None


trt, _SKIP_REASON = _real_tensorrt()
if _SKIP_REASON:
    pytest.skip(_SKIP_REASON, allow_module_level=True)

# Receivers attributed by their expression alone: in this code base and upstream they
# always hold the TensorRT object. Short names (net, network, self.net, config,
# builder, engine, context, runtime, layer) are NOT in this table: the project uses
# them for other things too (test_000_in_place_engine_inputs.py's `engine` is an fx
# Node, test_plugin_layout.py's `config` comes from a spy and its networks may be
# recording stand-ins, `runtime` can be torch_tensorrt.runtime), so they are
# attributed only from a binding in the same scope (see the module docstring).
NAMED_RECEIVERS: Dict[str, str] = {
    "ctx.net": "tensorrt.INetworkDefinition",  # ConversionContext.net
    "self.ctx.net": "tensorrt.INetworkDefinition",  # TRTInterpreter.ctx.net
    # TRTInterpreter._populate_trt_builder_config's local
    "builder_config": "tensorrt.IBuilderConfig",
    # a QDP_REGISTRY entry (_plugin_call.py, upstream's plugin converter generator)
    "plugin_def": "tensorrt.plugin._lib.PluginDef",
}

# Names missing in TensorRT 11.1 that the code uses only behind a hasattr() guard,
# each with its reason. Keep it tiny: test_allow_list_is_current fails for an entry
# that is no longer needed. (Today's guards, hasattr(trt.PreviewFeature,
# "ALIASED_PLUGIN_IO_10_03") and hasattr(trt.NetworkDefinitionCreationFlag,
# "STRONGLY_TYPED"), name things TensorRT 11.1 has.)
ALLOWED_MISSING: Dict[str, str] = {}

# In patch fragments the module-level imports are usually outside the hunk; upstream
# always imports TensorRT under these names.
PATCH_DEFAULT_ALIASES = {
    "trt": "tensorrt",
    "tensorrt": "tensorrt",
    "trtp": "tensorrt.plugin",
}


@dataclass(frozen=True)
class Finding:
    path: str
    line: int
    name: str
    why: str

    def __str__(self) -> str:
        return f"{self.path}:{self.line}: {self.name} ({self.why})"


# ------------------------------------------------------------------------------------
# The real bindings: members, signatures, result types


def _resolve(dotted: str) -> Any:
    """The real object named ``tensorrt.X`` or ``tensorrt.plugin._lib.Y``."""
    parts = dotted.split(".")
    for split in range(len(parts), 0, -1):
        try:
            obj = importlib.import_module(".".join(parts[:split]))
        except ImportError:
            continue
        for part in parts[split:]:
            obj = getattr(obj, part)
        return obj
    raise ImportError(dotted)


def _describe(obj: Any) -> str:
    if inspect.ismodule(obj):
        return re.sub(r"^tensorrt_bindings(\.tensorrt$)?", "tensorrt", obj.__name__)
    if inspect.isclass(obj):
        for module in ("tensorrt", "tensorrt.plugin"):
            if getattr(importlib.import_module(module), obj.__name__, None) is obj:
                return f"{module}.{obj.__name__}"
    if inspect.isclass(obj) or hasattr(obj, "__qualname__"):  # a class or function
        module = re.sub(r"^tensorrt_bindings", "tensorrt", str(obj.__module__))
        return f"{module}.{obj.__qualname__}"
    return f"the {type(obj).__name__} {obj!r}"


@functools.lru_cache(maxsize=None)
def _instance_attributes(cls: type) -> frozenset:
    """What a pure-Python (QDP) class assigns to ``self`` or lists in ``__slots__``."""
    names: Set[str] = set()
    for klass in cls.__mro__:
        names.update(getattr(klass, "__slots__", ()))
        try:
            with warnings.catch_warnings():  # QDP's source has invalid escape sequences
                warnings.simplefilter("ignore")
                tree = ast.parse(textwrap.dedent(inspect.getsource(klass)))
        except (OSError, TypeError, SyntaxError):
            continue
        for node in ast.walk(tree):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.ctx, ast.Store)
                and isinstance(node.value, ast.Name)
                and node.value.id == "self"
            ):
                names.add(node.attr)
    return frozenset(names)


def _is_registry(obj: Any) -> bool:
    """QDP's ``trtp.op``: its attributes are the plugins registered at run time."""
    return obj is importlib.import_module("tensorrt.plugin").op


def _has_member(cls: type, name: str) -> bool:
    return hasattr(cls, name) or name in _instance_attributes(cls)


_ANY = frozenset({"**"})  # accepts every keyword


def _doc_signatures(doc: Optional[str], name: str) -> List[Tuple[str, str]]:
    """(parameters, return type) of each signature line of a pybind docstring."""
    pattern = re.compile(
        rf"\s*(?:\d+\.\s*)?{re.escape(name)}\((.*)\)\s*(?:->\s*(.*?))?\s*$"
    )
    signatures = []
    for line in (doc or "").splitlines():
        match = pattern.match(line)
        if match and match.group(1).strip() != "*args, **kwargs":
            signatures.append((match.group(1), match.group(2) or ""))
    return signatures


def _doc_parameters(doc: Optional[str], name: str) -> Optional[frozenset]:
    signatures = _doc_signatures(doc, name)
    if not signatures:
        return None
    names: Set[str] = set()
    for parameters, _ in signatures:
        for stars, parameter in re.findall(
            r"(?:^|,)\s*(\*{0,2})(\w+)\s*(?=[:=,]|$)", parameters
        ):
            if stars == "**":
                return _ANY
            names.add(parameter)
    names.discard("self")
    return frozenset(names)


def _python_parameters(function: Any, bound: bool) -> Optional[frozenset]:
    try:
        parameters = list(inspect.signature(function).parameters.values())
    except (TypeError, ValueError):
        return None
    if bound and parameters:
        parameters = parameters[1:]
    if any(p.kind is inspect.Parameter.VAR_KEYWORD for p in parameters):
        return _ANY
    return frozenset(
        p.name
        for p in parameters
        if p.kind
        in (inspect.Parameter.POSITIONAL_OR_KEYWORD, inspect.Parameter.KEYWORD_ONLY)
    )


def _class_from_text(text: str) -> Optional[type]:
    match = re.fullmatch(r"\s*(?:\w+\.)*?tensorrt\.(\w+)\s*", text or "")
    candidate = getattr(trt, match.group(1), None) if match else None
    return candidate if inspect.isclass(candidate) else None


def _python_result(function: Any) -> Optional[type]:
    annotation = getattr(function, "__annotations__", {}).get("return")
    if isinstance(annotation, str):
        try:
            annotation = eval(annotation, getattr(function, "__globals__", {}))
        except Exception:
            return None
    return annotation if inspect.isclass(annotation) else None


def _doc_result(doc: Optional[str], name: str) -> Optional[type]:
    results = {result for _, result in _doc_signatures(doc, name)}
    return _class_from_text(results.pop()) if len(results) == 1 else None


# Values the scanner tracks: ("obj", real object), ("inst", real class) for an
# instance of it, ("member", class, name) for a method of an instance; None: unknown.
Value = Optional[Tuple[Any, ...]]


def _member_value(cls: type, name: str) -> Value:
    static = inspect.getattr_static(cls, name, None)
    if isinstance(static, property):
        if inspect.isfunction(static.fget):
            result = _python_result(static.fget)
        else:
            result = _doc_result(getattr(static.fget, "__doc__", None), "")
        return ("inst", result) if result else None
    if callable(getattr(cls, name, None)):
        return ("member", cls, name)
    return None


def _parameters(value: Value) -> Optional[frozenset]:
    if value is None:
        return None
    if value[0] == "member":
        _, cls, name = value
        function = getattr(cls, name)
        if inspect.isfunction(function) or inspect.ismethod(function):
            # a plain function takes self; a staticmethod or bound classmethod does not
            static = isinstance(inspect.getattr_static(cls, name), staticmethod)
            bound = inspect.isfunction(function) and not static
            return _python_parameters(function, bound=bound)
        return _doc_parameters(getattr(function, "__doc__", None), name)
    if value[0] == "obj":
        target = value[1]
        if inspect.isclass(target):
            if inspect.isfunction(target.__init__):
                return _python_parameters(target.__init__, bound=True)
            return _doc_parameters(target.__init__.__doc__, "__init__")
        if inspect.isfunction(target):
            return _python_parameters(target, bound=False)
        if callable(target):
            return _doc_parameters(getattr(target, "__doc__", None), target.__name__)
    return None


def _call_result(value: Value) -> Value:
    if value is None:
        return None
    if value[0] == "obj":
        target = value[1]
        if not callable(target):
            return None
        if inspect.isclass(target):
            return ("inst", target)
        if inspect.isfunction(target):
            result = _python_result(target)
        else:
            result = _doc_result(getattr(target, "__doc__", None), target.__name__)
        return ("inst", result) if result else None
    if value[0] == "member":
        _, cls, name = value
        function = getattr(cls, name)
        if inspect.isfunction(function):
            result = _python_result(function)
        else:
            result = _doc_result(getattr(function, "__doc__", None), name)
        return ("inst", result) if result else None
    return None


def _signature_text(value: Tuple[Any, ...]) -> str:
    if value[0] == "member":
        return f"{_describe(value[1])}.{value[2]}"
    return _describe(value[1])


# ------------------------------------------------------------------------------------
# The scanner


def _blank(text: str, open_quote: Optional[str]) -> Tuple[str, int, List[bool]]:
    """Blank comments and string contents (keeping positions and newlines).

    Returns the blanked text, the number of unterminated one-line strings (prose
    read as code has them: apostrophes) and, per line, whether the line continues a
    statement (starts inside a string or brackets).
    """
    out = list(text)
    quote, depth, oddities, i, n = open_quote, 0, 0, 0, len(text)
    continues = [quote is not None]
    while i < n:
        c = text[i]
        if quote:
            if c == "\\" and i + 1 < n and text[i + 1] != "\n":
                out[i] = out[i + 1] = " "
                i += 2
                continue
            if text.startswith(quote, i):
                i += len(quote)
                quote = None
                continue
            if c == "\n":
                if len(quote) == 1:
                    oddities += 1
                    quote = None
                continues.append(quote is not None or depth > 0)
            else:
                out[i] = " "
            i += 1
            continue
        if c == "#":
            while i < n and text[i] != "\n":
                out[i] = " "
                i += 1
            continue
        if c in "'\"":
            quote = text[i : i + 3] if text[i : i + 3] in ('"""', "'''") else c
            i += len(quote)
            continue
        if c in "([{":
            depth += 1
        elif c in ")]}":  # a hunk may start inside brackets
            depth = max(depth - 1, 0)
        elif c == "\\" and text[i + 1 : i + 2] == "\n":
            continues.append(True)
            i += 2
            continue
        elif c == "\n":
            continues.append(depth > 0)
        i += 1
    return "".join(out), oddities, continues


# Two names side by side, neither a keyword: never Python code, always prose.
_WORD_PAIR = re.compile(r"(?<![\w.])(?=([A-Za-z_]\w*) +([A-Za-z_]\w*)\b)")


def _prose_lines(code: str) -> int:
    def is_keyword(word: str) -> bool:
        return keyword.iskeyword(word) or keyword.issoftkeyword(word)

    return sum(
        any(
            not (is_keyword(a) or is_keyword(b))
            for a, b in (m.groups() for m in _WORD_PAIR.finditer(line))
        )
        for line in code.splitlines()
    )


class _Scope:
    def __init__(self, kind: str, parent: Optional["_Scope"]) -> None:
        self.kind, self.parent = kind, parent
        self.bindings: Dict[str, List[Tuple[str, Value]]] = {}

    def bind(self, name: str, how: str, value: Value) -> None:
        self.bindings.setdefault(name, []).append((how, value))


def _decide(entries: List[Tuple[str, Value]]) -> Value:
    for how, value in entries:
        if how == "import":  # an import wins over a fallback such as `trtp = None`
            return value
    values: List[Value] = []  # distinct values; a bound method is not hashable
    for _, value in entries:
        if not any(_same(value, seen) for seen in values):
            values.append(value)
    return values[0] if len(values) == 1 else None


def _same(a: Value, b: Value) -> bool:
    if a is b:
        return True
    try:
        return bool(a == b)
    except Exception:  # an object that cannot be compared is another value
        return False


class _Block:
    """One piece of code: a whole file, or the new side of a patch hunk."""

    def __init__(
        self,
        path: str,
        lines: Sequence[str],
        linenos: Sequence[int],
        checked: Sequence[bool],
        root: _Scope,
        fragment: bool,
    ) -> None:
        self.path, self.linenos, self.checked = path, linenos, checked
        self.raw = "\n".join(lines)
        if fragment:  # a hunk may start inside a docstring: take the likelier reading
            readings = []
            for open_quote in (None, '"""', "'''"):
                if open_quote and open_quote not in self.raw:
                    continue  # the reading in which the whole hunk is one string
                code, oddities, continues = _blank(self.raw, open_quote)
                score = oddities + _prose_lines(code)
                readings.append((score, open_quote is not None, code, continues))
            readings.sort(key=lambda reading: reading[:2])
            _, _, self.code, self.continues = readings[0]
        else:
            self.code, _, self.continues = _blank(self.raw, None)
        self.line_starts = [0] + [m.end() for m in re.finditer(r"\n", self.code)]
        self.findings: List[Finding] = []
        self.checked_names: Set[str] = set()
        self.skip_spans: List[Tuple[int, int]] = []
        self.comprehensions: List[Tuple[int, int, Set[str]]] = []
        self.module = _Scope("module", root)
        self.line_scopes: List[_Scope] = []
        self.def_scopes: Dict[int, _Scope] = {}
        self._build_scopes()
        self._bind()

    # -- positions ---------------------------------------------------------------------

    def _line_of(self, pos: int) -> int:
        return bisect.bisect_right(self.line_starts, pos) - 1

    def _report(self, pos: int, name: str, why: str) -> None:
        line = self._line_of(pos)
        if self.checked[line]:
            self.findings.append(Finding(self.path, self.linenos[line], name, why))

    def _note(self, pos: int, name: str) -> None:
        if self.checked[self._line_of(pos)]:
            self.checked_names.add(name)

    def _closing(self, pos: int) -> int:
        """Position of the bracket closing the one at pos (end of text if cut off)."""
        depth = 0
        for i in range(pos, len(self.code)):
            if self.code[i] in "([{":
                depth += 1
            elif self.code[i] in ")]}":
                depth -= 1
                if depth == 0:
                    return i
        return len(self.code)

    def _statement_end(self, pos: int) -> int:
        depth, i = 0, pos
        while i < len(self.code):
            c = self.code[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth = max(depth - 1, 0)
            elif c == "\n" and depth == 0 and self.code[i - 1] != "\\":
                return i
            i += 1
        return i

    def _top_level_split(self, start: int, end: int) -> List[Tuple[int, int]]:
        parts, depth, begin = [], 0, start
        for i in range(start, end):
            c = self.code[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif c == "," and depth == 0:
                parts.append((begin, i))
                begin = i + 1
        parts.append((begin, end))
        return [(a, b) for a, b in parts if self.code[a:b].strip()]

    # -- scopes and bindings -----------------------------------------------------------

    def _enclosing_opener(self, pos: int) -> Optional[int]:
        depth = 0
        for i in range(pos - 1, -1, -1):
            c = self.code[i]
            if c in ")]}":
                depth += 1
            elif c in "([{":
                if depth == 0:
                    return i
                depth -= 1
        return None

    def _statements(self):
        for index, start in enumerate(self.line_starts):
            end = self._statement_end(start)
            text = self.code[start:end]
            if not self.continues[index] and text.strip():
                yield index, start, end, text

    def _build_scopes(self) -> None:
        stack: List[Tuple[int, _Scope]] = [(-1, self.module)]
        scope = self.module
        for index, _ in enumerate(self.line_starts):
            line_end = self.code.find("\n", self.line_starts[index])
            text = self.code[
                self.line_starts[index] : None if line_end < 0 else line_end
            ]
            if not self.continues[index] and text.strip():
                indent = len(text) - len(text.lstrip())
                while len(stack) > 1 and stack[-1][0] >= indent:
                    stack.pop()
                scope = stack[-1][1]
                header = re.match(r"\s*(?:async\s+def|def|class)\b", text)
                if header:
                    kind = "class" if header.group(0).strip() == "class" else "def"
                    inner = _Scope(kind, scope)
                    self.def_scopes[index] = inner
                    stack.append((indent, inner))
            self.line_scopes.append(scope)

    def _self_scope(self, scope: _Scope) -> _Scope:
        s: Optional[_Scope] = scope
        while s is not None and s.kind != "class":
            s = s.parent
        return s if s is not None else self.module

    def _lookup(self, name: str, scope: _Scope, pos: int) -> Value:
        for opener, closer, names in self.comprehensions:
            if opener < pos < closer and name.split(".")[0] in names:
                return None
        if name.startswith("self."):
            entries = self._self_scope(scope).bindings.get(name)
            return _decide(entries) if entries else None
        s: Optional[_Scope] = scope
        while s is not None:
            if (s.kind != "class" or s is scope) and name in s.bindings:
                return _decide(s.bindings[name])
            s = s.parent
        return None

    def _bind_target(self, target: str, scope: _Scope, value: Value) -> None:
        target = target.strip()
        match = re.fullmatch(r"\*?([A-Za-z_]\w*)", target)
        if match:
            scope.bind(match.group(1), "assign", value)
        elif re.fullmatch(r"self\.[A-Za-z_]\w*", target):
            self._self_scope(scope).bind(target.replace(" ", ""), "assign", value)

    def _bind_names(self, names: str, scope: _Scope) -> None:
        for name in re.findall(r"[A-Za-z_]\w*", names):
            scope.bind(name, "assign", None)

    def _import(self, start: int, end: int, text: str, scope: _Scope) -> bool:
        """Bind what an import statement binds; check what it imports from TensorRT."""
        statement = re.match(r"\s*(?:from\s+([.\w]+)\s+)?import\s", text)
        if not statement:
            return False
        self.skip_spans.append((start, end))
        source = statement.group(1)
        module = (
            self._real_module(source, start + statement.start(1)) if source else None
        )
        names = re.compile(r"([\w.]+)(?:\s+as\s+(\w+))?")
        for match in names.finditer(self.code, start + statement.end(), end):
            name, alias = match.groups()
            pos = match.start()
            if source is None:  # import a.b [as c]
                real = self._real_module(name, pos)
                if alias is None:
                    alias = name.split(".")[0]
                    real = real and self._real_module(alias, None)
                value: Value = ("obj", real) if real else None
            elif module is None:  # from somewhere_else import name
                value = None
            else:
                value = self._real_attribute(module, name)
                if value is None:
                    why = f"{_describe(module)} has no attribute {name!r}"
                    self._report(pos, f"{source}.{name}", why)
                else:
                    self._note(pos, f"{_describe(module)}.{name}")
            scope.bind(alias or name, "import" if value else "assign", value)
        return True

    def _real_module(self, dotted: str, report_pos: Optional[int]) -> Any:
        if dotted.split(".")[0] != "tensorrt":
            return None
        try:
            module = importlib.import_module(dotted)
        except Exception as error:
            if report_pos is not None:
                self._report(report_pos, dotted, f"cannot be imported: {error}")
            return None
        if report_pos is not None:
            self._note(report_pos, dotted)
        return module

    def _real_attribute(self, obj: Any, name: str) -> Value:
        if hasattr(obj, name):
            return ("obj", getattr(obj, name))
        if inspect.ismodule(obj):
            try:
                return ("obj", importlib.import_module(f"{obj.__name__}.{name}"))
            except ImportError:
                return None
        return None

    def _annotation_value(self, start: int, end: int, scope: _Scope) -> Value:
        value = self._expression(start, end, scope)
        if value and value[0] == "obj" and inspect.isclass(value[1]):
            return ("inst", value[1])
        return None

    def _expression(self, start: int, end: int, scope: _Scope) -> Value:
        """The value of code[start:end] when it is one primary expression, else None."""
        text = self.code[start:end]
        offset = len(text) - len(text.lstrip())
        if not re.match(r"[A-Za-z_]", text[offset:]):
            return None
        value, stop = self._evaluate(start + offset, scope, report=False)
        return value if not self.code[stop:end].strip() else None

    def _bind(self) -> None:
        for index, start, end, text in self._statements():
            scope = self.line_scopes[index]
            if self._import(start, end, text, scope):
                continue
            header = re.match(r"(\s*(?:async\s+def|def|class)\s+)(\w+)", text)
            if header:
                scope.bind(header.group(2), "assign", None)
                inner = self.def_scopes[index]
                self.skip_spans.append((start + header.start(2), start + header.end(2)))
                paren = start + header.end()
                if "def" in header.group(1) and self.code[paren : paren + 1] == "(":
                    close = self._closing(paren)
                    for a, b in self._top_level_split(paren + 1, close):
                        self._bind_parameter(a, b, inner)
                continue
            loop = re.match(r"(\s*(?:async\s+)?)for\s+(.+?)\s+in\b", text, re.S)
            if loop:
                self._bind_names(loop.group(2), scope)
            if re.match(r"\s*(?:async\s+)?with\b|\s*except\b", text):
                for name in re.findall(r"\bas\s+(\w+)", text):
                    scope.bind(name, "assign", None)
            for match in re.finditer(r"\bfor\s+([\w\s,()]+?)\s+in\b", text):
                if loop and match.start() == len(loop.group(1)):
                    continue
                # a comprehension's variables live in the comprehension only
                opener = self._enclosing_opener(start + match.start())
                if opener is None:
                    self._bind_names(match.group(1), scope)
                else:
                    names = set(re.findall(r"[A-Za-z_]\w*", match.group(1)))
                    self.comprehensions.append((opener, self._closing(opener), names))
            for names in re.findall(r"\blambda\b([^:]*):", text):
                self._bind_names(re.sub(r"=[^,]*", "", names), scope)
            self._bind_assignment(start, end, text, scope)

    def _bind_parameter(self, a: int, b: int, scope: _Scope) -> None:
        match = re.match(r"\s*\**([A-Za-z_]\w*)\s*(:)?", self.code[a:b])
        if not match:
            return
        value: Value = None
        if match.group(2):
            ann_start = a + match.end()
            eq = self.code.find("=", ann_start, b)
            value = self._annotation_value(ann_start, b if eq < 0 else eq, scope)
        scope.bind(match.group(1), "assign", value)

    def _bind_assignment(self, start: int, end: int, text: str, scope: _Scope) -> None:
        if re.match(
            r"\s*(?:if|elif|while|return|assert|yield|raise|del|print)\b", text
        ):
            return
        depth, equals, colon = 0, -1, -1
        for i in range(start, end):
            c = self.code[i]
            if c in "([{":
                depth += 1
            elif c in ")]}":
                depth -= 1
            elif depth == 0 and c == ":" and colon < 0 and equals < 0:
                colon = i
            elif depth == 0 and c == "=":
                before, after = self.code[i - 1], self.code[i + 1 : i + 2]
                if after == "=" or before in "=!<>":
                    continue
                equals = i
                break
        if equals < 0 and colon < 0:
            return
        augmented = equals > 0 and self.code[equals - 1] in "+-*/%&|^@"
        target_end = colon if colon >= 0 else equals
        if target_end == -1:
            return
        targets = self.code[start:target_end].strip()
        if augmented:
            targets = targets[:-1]
        if colon >= 0:
            value = self._annotation_value(
                colon + 1, equals if equals >= 0 else end, scope
            )
        elif augmented:
            value = None
        else:
            value = self._expression(equals + 1, end, scope)
        parts = [p for p in targets.strip("()[] ").split(",") if p.strip()]
        if len(parts) != 1 or targets.endswith(","):
            value = None
        for part in parts:
            self._bind_target(part, scope, value)

    # -- evaluation of one primary expression ------------------------------------------

    def _root(self, pos: int, scope: _Scope) -> Tuple[Value, int, str]:
        chain = re.match(r"[A-Za-z_]\w*(?:\s*\.\s*[A-Za-z_]\w*)*", self.code[pos:])
        assert chain is not None
        parts = [p.strip() for p in chain.group(0).split(".")]
        ends = [
            m.end()
            for m in re.finditer(r"[A-Za-z_]\w*", self.code[pos : pos + chain.end()])
        ]
        if parts[0] == "self" and len(parts) > 1:
            value = self._lookup(f"self.{parts[1]}", scope, pos)
            if value is not None:
                return value, pos + ends[1], f"self.{parts[1]}"
        for receiver, class_path in NAMED_RECEIVERS.items():
            names = receiver.split(".")
            if parts[: len(names)] == names and len(parts) > len(names):
                return (
                    ("inst", _resolve(class_path)),
                    pos + ends[len(names) - 1],
                    receiver,
                )
        return self._lookup(parts[0], scope, pos), pos + ends[0], parts[0]

    def _evaluate(self, pos: int, scope: _Scope, report: bool) -> Tuple[Value, int]:
        value, i, text = self._root(pos, scope)
        code = self.code
        while value is not None:
            attribute = re.compile(r"\s*\.\s*([A-Za-z_]\w*)").match(code, i)
            call = re.compile(r"\s*\(").match(code, i)
            if attribute:
                name, name_pos = attribute.group(1), attribute.start(1)
                text += f".{name}"
                if value[0] == "obj" and _is_registry(value[1]):
                    value = None
                elif value[0] == "obj":
                    found = self._real_attribute(value[1], name)
                    if found is None:
                        if report:
                            self._report(
                                name_pos,
                                text,
                                f"{_describe(value[1])} has no attribute {name!r}",
                            )
                        return None, attribute.end()
                    if report:
                        self._note(name_pos, f"{_describe(value[1])}.{name}")
                    value = found
                elif value[0] == "inst":
                    cls = value[1]
                    if not _has_member(cls, name):
                        if report:
                            self._report(
                                name_pos,
                                text,
                                f"{_describe(cls)} has no attribute {name!r}",
                            )
                        return None, attribute.end()
                    if report:
                        self._note(name_pos, f"{_describe(cls)}.{name}")
                    value = _member_value(cls, name)
                else:
                    value = None
                i = attribute.end()
            elif call:
                open_pos = call.end() - 1
                close = self._closing(open_pos)
                if report and value[0] in ("obj", "member"):
                    self._check_keywords(value, text, open_pos, close)
                text += "(...)"
                value = _call_result(value)
                i = close + 1
            else:
                break
        return value, i

    def _check_keywords(
        self, value: Tuple[Any, ...], text: str, open_pos: int, close: int
    ) -> None:
        arguments = self._top_level_split(open_pos + 1, close)
        keywords = []
        for a, b in arguments:
            match = re.match(r"\s*([A-Za-z_]\w*)\s*=(?!=)", self.code[a:b])
            if match:
                keywords.append((match.group(1), a + match.start(1)))
        if not keywords:
            return
        parameters = _parameters(value)
        if parameters is None or parameters is _ANY:
            return
        for name, pos in keywords:
            if name in parameters:
                self._note(pos, f"{_signature_text(value)}({name}=)")
            else:
                self._report(
                    pos,
                    f"{text}({name}=...)",
                    f"{name!r} is not a parameter of {_signature_text(value)}"
                    f"({', '.join(sorted(parameters))})",
                )

    def _check_getattr(self, pos: int, scope: _Scope) -> None:
        """``getattr(trt.X, "NAME")`` with a literal name and no default checks NAME."""
        call = re.compile(r"getattr\s*\(").match(self.code, pos)
        if not call:
            return
        close = self._closing(call.end() - 1)
        arguments = self._top_level_split(call.end(), close)
        if len(arguments) != 2:
            return
        literal = re.fullmatch(
            r"\s*(['\"])(\w+)\1\s*", self.raw[arguments[1][0] : arguments[1][1]]
        )
        value = self._expression(*arguments[0], scope)
        if not literal or value is None or value[0] not in ("obj", "inst"):
            return
        name = literal.group(2)
        owner = value[1]
        ok = (
            self._real_attribute(owner, name)
            if value[0] == "obj"
            else _has_member(owner, name)
        )
        if ok:
            self._note(arguments[1][0], f"{_describe(owner)}.{name}")
        else:
            self._report(
                arguments[1][0],
                f"{self.code[arguments[0][0]:arguments[0][1]].strip()}.{name}",
                f"{_describe(owner)} has no attribute {name!r}",
            )

    def scan(self) -> None:
        skip = sorted(self.skip_spans)
        for match in re.finditer(r"(?<![\w.])[A-Za-z_]\w*", self.code):
            pos = match.start()
            index = bisect.bisect_right(skip, (pos, float("inf"))) - 1
            if index >= 0 and skip[index][0] <= pos < skip[index][1]:
                continue
            if keyword.iskeyword(match.group(0)):
                continue
            scope = self.line_scopes[self._line_of(pos)]
            if match.group(0) == "getattr":
                self._check_getattr(pos, scope)
                continue
            self._evaluate(pos, scope, report=True)


def _patch_default_root() -> _Scope:
    root = _Scope("module", None)
    for alias, module in PATCH_DEFAULT_ALIASES.items():
        root.bind(alias, "import", ("obj", importlib.import_module(module)))
    return root


def _patch_hunks(text: str) -> List[Tuple[str, List[Tuple[int, str, bool]]]]:
    """(target file, new side of the hunk as (patch line, text, added)) per hunk."""
    hunks: List[Tuple[str, List[Tuple[int, str, bool]]]] = []
    target, old_left, new_left, hunk = "", 0, 0, None
    for number, line in enumerate(text.splitlines(), 1):
        if old_left > 0 or new_left > 0:
            assert hunk is not None
            if line.startswith("+"):
                hunk.append((number, line[1:], True))
                new_left -= 1
            elif line.startswith("-"):
                old_left -= 1
            elif line.startswith("\\"):
                pass
            else:
                hunk.append((number, line[1:], False))
                old_left -= 1
                new_left -= 1
            continue
        if line.startswith("+++ "):
            target = re.sub(r"^b/", "", line[4:].strip())
            continue
        header = re.match(r"@@ -\d+(?:,(\d+))? \+\d+(?:,(\d+))? @@", line)
        if header:
            old_left = int(header.group(1) or 1)
            new_left = int(header.group(2) or 1)
            hunk = []
            hunks.append((target, hunk))
    return hunks


def scan_patch(path: str, text: str) -> Tuple[List[Finding], Set[str]]:
    findings: List[Finding] = []
    checked: Set[str] = set()
    hunks = [(t, h) for t, h in _patch_hunks(text) if t.endswith(".py")]
    for target in sorted({t for t, _ in hunks}):
        # Module-level imports seen anywhere in this file's hunks apply to all of them.
        section = _Scope("module", _patch_default_root())
        blocks = []
        for _, hunk in (h for h in hunks if h[0] == target):
            block = _Block(
                path,
                [line for _, line, _ in hunk],
                [number for number, _, _ in hunk],
                [added for _, _, added in hunk],
                section,
                fragment=True,
            )
            for name, entries in block.module.bindings.items():
                imports = [entry for entry in entries if entry[0] == "import"]
                for entry in imports:
                    section.bind(name, *entry)
            blocks.append(block)
        for block in blocks:
            block.scan()
            findings += block.findings
            checked |= block.checked_names
    return findings, checked


def scan_python(path: str, text: str) -> Tuple[List[Finding], Set[str]]:
    lines = text.splitlines()
    block = _Block(
        path,
        lines,
        range(1, len(lines) + 1),
        [True] * len(lines),
        _Scope("module", None),
        fragment=False,
    )
    block.scan()
    return block.findings, block.checked_names


def project_sources() -> List[Path]:
    return (
        sorted(REPO.glob("patches/*.patch"))
        + sorted((REPO / "py").rglob("*.py"))
        + sorted((REPO / "tests" / "py").rglob("*.py"))
        + sorted((REPO / "tools" / "bench").glob("*.py"))
    )


@functools.lru_cache(maxsize=None)
def scan_project() -> Tuple[Tuple[Finding, ...], frozenset]:
    findings: List[Finding] = []
    checked: Set[str] = set()
    for source in project_sources():
        relative = source.relative_to(REPO).as_posix()
        scanner = scan_patch if source.suffix == ".patch" else scan_python
        found, names = scanner(relative, source.read_text(encoding="utf-8"))
        findings += found
        checked |= names
    return tuple(findings), frozenset(checked)


# ------------------------------------------------------------------------------------
# The tests


def test_every_tensorrt_name_the_project_uses_exists_in_tensorrt_11_1():
    findings, _ = scan_project()
    missing = [f for f in findings if f.name not in ALLOWED_MISSING]
    assert not missing, (
        f"{len(missing)} TensorRT name(s) used by the project do not exist in the real "
        f"TensorRT {trt.__version__} bindings:\n" + "\n".join(map(str, missing))
    )


def test_allow_list_is_current():
    findings, _ = scan_project()
    used = {f.name for f in findings}
    stale = sorted(set(ALLOWED_MISSING) - used)
    assert not stale, (
        "ALLOWED_MISSING lists names the project no longer uses or that exist in "
        f"TensorRT {trt.__version__}: {stale}"
    )


def test_the_scan_reaches_the_names_the_project_relies_on():
    """Guards against a scanner that silently checks nothing (update as code moves)."""
    _, checked = scan_project()
    expected = {
        "tensorrt.PreviewFeature.ALIASED_PLUGIN_IO_10_03",  # patch 0011
        "tensorrt.IBuilderConfig.set_preview_feature",  # patch 0011: builder_config
        "tensorrt.INetworkDefinition.add_plugin",  # _plugin_call.py: ctx.net
        "tensorrt.INetworkDefinition.add_plugin(aot=)",  # ... and its keyword
        "tensorrt.IPluginV3Layer.num_outputs",  # layer = ctx.net.add_plugin(...)
        "tensorrt.plugin.TensorDesc",  # from tensorrt.plugin import ..., TensorDesc
        "tensorrt.plugin.register",  # trtp.register
        "tensorrt.plugin._lib.PluginDef.register_func",  # plugin_def
    }
    assert expected <= checked, f"not reached: {sorted(expected - checked)}"


_SNIPPET = """\
import tensorrt as trt
import tensorrt.plugin as trtp
from tensorrt.plugin import ShapeExprs, TensorDesc


def convert(ctx, x, use_aot):
    ctx.net.add_plugn((x,), aot=use_aot)
    ctx.net.add_plugin((x,), aot_=True)
    layer = ctx.net.add_plugin((x,), aot=use_aot)
    layer.name = "plugin"  # "trt.NotAName" in a comment or string is not code
    builder_config.set_preview_feature(
        trt.PreviewFeature.ALIASED_PLUGIN_IO_10_3, True
    )
    builder_config.set_preview_feature(
        trt.PreviewFeature.ALIASED_PLUGIN_IO_10_03, True
    )
    unknown.add_plugn(x, aot_=True)  # a receiver that cannot be attributed: ignored
    desc = TensorDesc()
    desc.shape_expr = ShapeExprs(2, _is_dummy=True)
    desc._immutable = True


def run(blob):
    engine = trt.Runtime(trt.Logger()).deserialize_cuda_engine(blob)
    context = engine.create_execution_context()
    context.set_tensor_address(engine.get_tensor_name(0), 0)


def elsewhere(engine):  # another scope's `engine` (an fx Node, say): not attributed
    return engine.update_arg(0, None)


def shadowed(trt):
    return trt.not_a_tensorrt_name


@trtp.register("demo::op")
def _(x: trtp.TensorDesc) -> trtp.TensorDesc:
    return x.like()
"""

_EXPECTED = [
    (7, "ctx.net.add_plugn"),
    (8, "ctx.net.add_plugin(aot_=...)"),
    (12, "trt.PreviewFeature.ALIASED_PLUGIN_IO_10_3"),
]

_EXPECTED_CHECKED = {
    "tensorrt.plugin.ShapeExprs",  # from-import
    "tensorrt.IPluginV3Layer.name",  # layer = ctx.net.add_plugin(...): docstring result
    "tensorrt.IBuilderConfig.set_preview_feature",  # named receiver
    "tensorrt.plugin.ShapeExprs(_is_dummy=)",  # QDP Python signature
    "tensorrt.plugin.TensorDesc._immutable",  # QDP instance attribute
    "tensorrt.Runtime.deserialize_cuda_engine",  # on a constructed object
    "tensorrt.ICudaEngine.create_execution_context",  # engine = ...: docstring result
    "tensorrt.IExecutionContext.set_tensor_address",
    "tensorrt.ICudaEngine.get_tensor_name",
    "tensorrt.plugin.TensorDesc.like",  # x: trtp.TensorDesc
}


def test_checker_reports_exactly_the_misspellings_in_python_source():
    findings, checked = scan_python("snippet.py", _SNIPPET)
    assert [(f.line, f.name) for f in findings] == _EXPECTED, "\n".join(
        map(str, findings)
    )
    assert _EXPECTED_CHECKED <= checked, sorted(_EXPECTED_CHECKED - checked)
    assert "INetworkDefinition has no attribute 'add_plugn'" in findings[0].why
    assert "'aot_' is not a parameter of tensorrt.INetworkDefinition.add_plugin" in (
        findings[1].why
    )


def test_checker_reports_exactly_the_misspellings_on_added_patch_lines():
    # The snippet's lines become added lines of a hunk whose context and removed lines
    # carry misspellings of their own, which must not be reported.
    added = _SNIPPET.splitlines()
    header = [
        "Description: synthetic",
        "--- a/py/torch_tensorrt/demo.py",
        "+++ b/py/torch_tensorrt/demo.py",
        f"@@ -1,4 +1,{len(added) + 3} @@",
        " the hunk starts in a docstring: trt.NotAName, ctx.net.add_plugn(x)",
        ' """',
        "-ctx.net.add_plugn(x, aot_=True)",
        " ctx.net.add_plugn(x, aot_=True)",
    ]
    text = "\n".join(header + ["+" + line for line in added]) + "\n"
    findings, checked = scan_patch("demo.patch", text)
    offset = len(header)
    assert [(f.line - offset, f.name) for f in findings] == _EXPECTED, "\n".join(
        map(str, findings)
    )
    assert _EXPECTED_CHECKED <= checked, sorted(_EXPECTED_CHECKED - checked)
