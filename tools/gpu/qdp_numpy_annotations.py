"""Which NumPy array annotations TensorRT's QDP accepts for plugin attributes.

QDP (``tensorrt.plugin``) decides whether an attribute annotation is a NumPy
array, and of which dtype, with ``_is_numpy_array`` and ``_infer_numpy_type`` in
its ``_utils.py``. This script loads that file from a TensorRT bindings wheel or
an installed ``tensorrt_bindings`` (its only TensorRT use at import is a table of
field types, answered by a placeholder module) and asks both functions about the
annotation forms a plugin author may write, under the NumPy installed:

    python tools/gpu/qdp_numpy_annotations.py tensorrt_cu13_bindings-11.1.0.106-*.whl

It runs without a GPU and without TensorRT's libraries.
"""

import argparse
import importlib.util
import sys
import tempfile
import types
import typing
import zipfile

import numpy as np
import numpy.typing as npt

FORMS = {
    "numpy.typing.NDArray[numpy.float32]": lambda: npt.NDArray[np.float32],
    "numpy.ndarray[typing.Any, numpy.dtype[numpy.float32]]": lambda: np.ndarray[
        typing.Any, np.dtype[np.float32]
    ],
    "numpy.ndarray[tuple[typing.Any, ...], numpy.dtype[numpy.float32]]": lambda: np.ndarray[
        tuple[typing.Any, ...], np.dtype[np.float32]
    ],
}


class _Placeholder:
    def __getattr__(self, name: str) -> "_Placeholder":
        return _Placeholder()


def load_qdp_utils(source: str) -> types.ModuleType:
    """QDP's ``_utils`` module from a wheel or from a path to ``_utils.py``."""
    path = source
    if source.endswith(".whl"):
        with zipfile.ZipFile(source) as wheel:
            data = wheel.read("tensorrt_bindings/plugin/_utils.py")
        handle = tempfile.NamedTemporaryFile("wb", suffix=".py", delete=False)
        handle.write(data)
        handle.close()
        path = handle.name
    trt = types.ModuleType("tensorrt")
    trt.__getattr__ = lambda name: _Placeholder()  # type: ignore[method-assign]
    sys.modules["tensorrt"] = trt
    spec = importlib.util.spec_from_file_location("qdp_utils", path)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("source", help="a bindings wheel, or QDP's _utils.py")
    utils = load_qdp_utils(parser.parse_args().source)
    print(f"NumPy {np.__version__}, Python {sys.version.split()[0]}")
    for name, make in FORMS.items():
        annotation = make()
        accepted = bool(utils._is_numpy_array(annotation))
        dtype = utils._infer_numpy_type(annotation) if accepted else None
        print(f"{name}: accepted={accepted} dtype={dtype} ({annotation!r})")


if __name__ == "__main__":
    main()
