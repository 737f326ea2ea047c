"""Validation of the ``**kwargs`` of the Dynamo compile entry points.

``compile`` and ``convert_exported_program_to_serialized_trt_engine`` take
``**kwargs`` for deprecated option names. Any other unknown keyword used to be
ignored silently, so a misspelled option, or an option of a newer release
(e.g. ``alias_map_path``), compiled without it.
"""

from __future__ import annotations

import difflib
import inspect
import logging
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


def check_keyword_arguments(
    function: Callable[..., Any], kwargs: Dict[str, Any]
) -> None:
    """Reject keyword arguments that ``function`` would ignore.

    Accepted in ``kwargs``: the known deprecated names, options of
    ``torch_tensorrt.dynamo.trace`` and ``CompilationSettings`` fields; a field
    that ``function`` does not apply is reported with a warning.

    Args:
        function (Callable): The entry point whose ``**kwargs`` these are
        kwargs (Dict[str, Any]): Its ``**kwargs``

    Raises:
        TypeError: naming the function, every unknown keyword and the accepted
            names closest to each
    """
    parameters = set(inspect.signature(function).parameters)
    settings_fields = {f.name for f in fields(CompilationSettings)}
    accepted = (
        parameters
        | settings_fields
        | _DEPRECATED_KEYWORD_ARGUMENTS
        | _TRACE_KEYWORD_ARGUMENTS
    )
    qualified_name = f"torch_tensorrt.dynamo.{function.__name__}"
    unknown = [key for key in kwargs if key not in accepted]
    if unknown:
        candidates = sorted(
            (parameters - {"kwargs"}) | settings_fields | _DEPRECATED_KEYWORD_ARGUMENTS
        )
        described = []
        for key in unknown:
            close = difflib.get_close_matches(key, candidates, n=3)
            hint = (
                f" (did you mean {', '.join(repr(c) for c in close)}?)" if close else ""
            )
            described.append(f"{key!r}{hint}")
        plural = "s" if len(unknown) > 1 else ""
        raise TypeError(
            f"{qualified_name}() got unexpected keyword argument{plural} "
            f"{', '.join(described)}"
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
