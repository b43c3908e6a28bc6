"""llama-cpp-python, imported lazily, and the few ggml functions it does not bind, from the ggml library it loads.

Without the extra, `record` says in one line how to install it. The ggml functions come from libggml-base.so
beside libllama.so in llama_cpp's lib folder: the same library libllama uses, so tensors it hands to the eval
callback can be read with it.
"""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path
from types import ModuleType

from moe_model.errors import MoeModelError, one_line
from moe_model.limits import RECORD_BUILD_MINUTES
from moe_model.numba_cache import openmp_as_llama_cpp_runs_it


class RecordError(MoeModelError):
    """A recording that cannot start or went wrong: the extra missing, a model llama.cpp cannot load, bad input."""


INSTALL_HINT = (
    "record needs llama-cpp-python: pip install -e '.[record]' (it builds llama.cpp from source once, "
    f"about {RECORD_BUILD_MINUTES} min of CPU time; pip keeps the wheel)"
)


@dataclass(frozen=True)
class Runtime:
    """llama_cpp's low-level module, its version, ggml's tensor functions, and the llama.cpp it vendors."""

    llama: ModuleType
    version: str
    ggml: ctypes.CDLL
    llama_cpp: str | None = None  # vendored_llama_cpp: the commit, as the libraries report it


def load_runtime() -> Runtime:
    """llama-cpp-python and its ggml library; RecordError (one line, how to install) without the extra."""
    openmp_as_llama_cpp_runs_it()
    try:
        import llama_cpp
        from llama_cpp import llama_cpp as low
    except ImportError:
        raise RecordError(INSTALL_HINT) from None
    except (OSError, RuntimeError) as err:  # its shared library failed to load
        raise RecordError(f"llama-cpp-python is installed but its library does not load: {one_line(err)}") from None
    ggml = _ggml_library(Path(low._base_path))
    return Runtime(low, str(llama_cpp.__version__), ggml, vendored_llama_cpp(low, ggml))


def vendored_llama_cpp(low: ModuleType, ggml: ctypes.CDLL) -> str | None:
    """The llama.cpp the wheel was built from, as its libraries say: ggml_commit() (the tree's short commit; "-dirty"
    where the wheel's build changed files) with libllama's llama_version() and ggml_version(). llama.cpp's build
    number (LLAMA_BUILD_NUMBER) is compiled into common/, which llama-cpp-python does not ship, so none is given.
    None where the libraries predate these functions."""
    try:
        ggml.ggml_commit.restype = ggml.ggml_version.restype = ctypes.c_char_p
        commit, ggml_version = ggml.ggml_commit().decode(), ggml.ggml_version().decode()
        library = low.llama_version().decode()
    except (AttributeError, UnicodeDecodeError):
        return None
    return f"commit {commit} (no build number exposed; libllama {library}, ggml {ggml_version})"


def _ggml_library(lib_dir: Path) -> ctypes.CDLL:
    """libggml-base (ggml_get_name, ggml_nbytes, ggml_backend_tensor_get), loaded from llama_cpp's lib folder:
    dlopen returns the copy libllama already loaded."""
    path = lib_dir / "libggml-base.so"
    if not path.is_file():
        raise RecordError(f"llama-cpp-python's lib folder has no libggml-base.so: {lib_dir}")
    lib = ctypes.CDLL(str(path))
    lib.ggml_get_name.argtypes, lib.ggml_get_name.restype = [ctypes.c_void_p], ctypes.c_char_p
    lib.ggml_nbytes.argtypes, lib.ggml_nbytes.restype = [ctypes.c_void_p], ctypes.c_size_t
    lib.ggml_backend_tensor_get.argtypes = [ctypes.c_void_p, ctypes.c_void_p, ctypes.c_size_t, ctypes.c_size_t]
    lib.ggml_backend_tensor_get.restype = None
    return lib
