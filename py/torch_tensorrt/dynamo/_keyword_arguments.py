"""Warn about the ``**kwargs`` the Dynamo compile entry points ignore: an option of
an older release (which must keep working), a misspelled one, or one of a newer
release. They stay ignored, but no longer silently.
"""

from __future__ import annotations

import difflib
import inspect
import logging
import warnings
from dataclasses import fields
from typing import Any, Callable, Dict

from torch_tensorrt.dynamo._settings import CompilationSettings

logger = logging.getLogger(__name__)

# Deprecated names the entry points read from **kwargs (each with its
# DeprecationWarning and mapped onto its replacement)
_DEPRECATED_KEYWORD_ARGUMENTS = frozenset(
    {"debug", "truncate_long_and_double", "refit", "make_refittable"}
)

# CompilationSettings fields the entry points read from **kwargs
_SETTINGS_READ_FROM_KWARGS = frozenset({"enable_cross_compile_for_windows"})

# torch_tensorrt.compile(ir="dynamo") and convert_method_to_trt_engine pass
# the same **kwargs to torch_tensorrt.dynamo.trace and to these entry points;
# trace reads these
_TRACE_KEYWORD_ARGUMENTS = frozenset({"strict"})

# A suggestion must be this close (difflib ratio) to be offered: a typo, not
# a different option that shares a prefix
_SUGGESTION_CUTOFF = 0.8


def warn_ignored_keyword_arguments(
    function: Callable[..., Any], kwargs: Dict[str, Any]
) -> None:
    """Warn about the keyword arguments that ``function`` ignores.

    Known in ``kwargs``: the deprecated names, options of
    ``torch_tensorrt.dynamo.trace`` and ``CompilationSettings`` fields. Any
    other keyword gets a ``UserWarning`` naming the function, the keyword and
    the accepted names closest to it; a settings field that ``function`` does
    not apply is logged as a warning.
    """
    parameters = set(inspect.signature(function).parameters)
    settings_fields = {f.name for f in fields(CompilationSettings)}
    known = (
        parameters
        | settings_fields
        | _DEPRECATED_KEYWORD_ARGUMENTS
        | _TRACE_KEYWORD_ARGUMENTS
    )
    qualified_name = f"torch_tensorrt.dynamo.{function.__name__}"
    unknown = [key for key in kwargs if key not in known]
    if unknown:
        candidates = sorted(
            (parameters - {"kwargs"}) | settings_fields | _DEPRECATED_KEYWORD_ARGUMENTS
        )
        described = []
        for key in unknown:
            close = difflib.get_close_matches(
                key, candidates, n=3, cutoff=_SUGGESTION_CUTOFF
            )
            hint = (
                f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            )
            described.append(f"{key!r}{hint}")
        plural = "s" if len(unknown) > 1 else ""
        warnings.warn(
            f"{qualified_name}() ignores the unknown keyword argument{plural} "
            f"{', '.join(described)}: compiling without {'them' if plural else 'it'}",
            UserWarning,
            stacklevel=3,
        )
    ignored = sorted(
        key
        for key in kwargs
        if key in settings_fields
        and key not in parameters
        and key not in _SETTINGS_READ_FROM_KWARGS
    )
    if ignored:
        logger.warning(
            f"{qualified_name}() does not take the compilation setting(s) "
            f"{ignored}; they have no effect"
        )
