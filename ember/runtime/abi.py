"""What a compiled Ember library and its callers agree on: the C functions every
library exports (with their ctypes signatures), the tensors at its boundary, the
dtypes they may have, the alignment of every buffer, and the files of an artifact.

    functions = CLibrary(Path("mod.so"), source="net.tar").library  # ArtifactError if
    functions.ember_num_steps()                                        # not an Ember one
    TensorSpec("data", (1, 224, 224, 3), "float32").nbytes

The functions are hand-written once in `c/runtime.c` (`ABI_SYMBOLS`, with the types
`c/ember_internal.h` declares); `ember.runtime.module` wraps them for NumPy arrays,
`ember.runtime.aot` generates what they call. Standard library only: a device-side
server on a board with a bare Python loads and runs libraries through this module.
"""

from __future__ import annotations

import ctypes
import hashlib
import math
import os
from dataclasses import dataclass
from pathlib import Path

from ember.device import dtype_bytes
from ember.errors import ArtifactError

# Bytes every buffer a kernel sees starts on: a cache line, and the widest vector load
# (AVX-512). The runtime's buffers and arena (c/ember_internal.h's EMBER_ALIGNMENT), the
# memory plan's offsets, the kernels' own allocations (ember.codegen.c) and the tuner's
# arguments all use it, so kernels may assume it.
ALIGNMENT = 64

# The members of an artifact (.tar): the library, its metadata, its params.
LIBRARY_FILE = "mod.so"
METADATA_FILE = "mod.json"
PARAMS_FILE = "mod.params"
ARTIFACT_MEMBERS = (LIBRARY_FILE, METADATA_FILE, PARAMS_FILE)

# The dtypes of tensors at a library's boundary (NumPy's names) -> the safetensors
# dtype, as ember_create_from_file checks it.
SAFETENSORS_DTYPES = {
    "float16": "F16",
    "float32": "F32",
    "float64": "F64",
    "int8": "I8",
    "int16": "I16",
    "int32": "I32",
    "int64": "I64",
    "uint8": "U8",
    "uint16": "U16",
    "uint32": "U32",
    "uint64": "U64",
    "bool": "BOOL",
}

REBUILD_HINT = "the artifact is damaged or was not made by Ember; rebuild it with `ember compile`"

_POINTERS = ctypes.POINTER(ctypes.c_void_p)
_INSTANCE, _INT32, _DOUBLE = ctypes.c_void_p, ctypes.c_int32, ctypes.c_double
# The C ABI every library exports (c/runtime.c), nothing else: every object is compiled
# with -fvisibility=hidden and these are the EMBER_EXPORT functions. name -> (restype,
# argtypes).
ABI_SIGNATURES: dict[str, tuple[object, tuple[object, ...]]] = {
    "ember_create": (_INSTANCE, (_POINTERS,)),
    "ember_create_from_file": (_INSTANCE, (ctypes.c_char_p,)),
    "ember_run": (_INT32, (_INSTANCE, _POINTERS, _POINTERS)),
    "ember_benchmark": (
        _INT32,
        (_INSTANCE, _POINTERS, _POINTERS, _INT32, _INT32, _DOUBLE, _INT32, ctypes.POINTER(_DOUBLE)),
    ),
    "ember_profile": (_INT32, (_INSTANCE, _POINTERS, _POINTERS, _INT32, ctypes.POINTER(_DOUBLE))),
    "ember_num_steps": (_INT32, ()),
    "ember_step_name": (ctypes.c_char_p, (_INT32,)),
    "ember_step_kernel": (ctypes.c_char_p, (_INT32,)),
    "ember_threads": (_INT32, (_INSTANCE,)),
    "ember_destroy": (None, (_INSTANCE,)),
    "ember_target": (ctypes.c_char_p, ()),
    "ember_last_error": (ctypes.c_char_p, ()),
}
ABI_SYMBOLS = tuple(ABI_SIGNATURES)
# Exported by the libraries of this version on, bound where present: a library built
# before kernel swapping still loads and runs (`Module.set_step_kernel` asks for a
# rebuild).
OPTIONAL_SIGNATURES: dict[str, tuple[object, tuple[object, ...]]] = {
    "ember_set_step_kernel": (_INT32, (_INT32, ctypes.c_void_p)),
}


@dataclass(frozen=True, slots=True)
class TensorSpec:
    """A tensor at a library's boundary: one input, output or param."""

    name: str
    shape: tuple[int, ...]
    dtype: str

    def __post_init__(self) -> None:
        if self.dtype not in SAFETENSORS_DTYPES:
            raise ValueError(
                f"tensor '{self.name}' has dtype {self.dtype!r}; a library's inputs, outputs "
                f"and params are one of {', '.join(SAFETENSORS_DTYPES)}"
            )

    @property
    def nbytes(self) -> int:
        return math.prod(self.shape) * dtype_bytes(self.dtype)

    def __str__(self) -> str:
        return f"{self.name} {self.shape} {self.dtype}"


# OpenMP settings for every process that runs Ember's kernels, each unless the user
# chose a wait policy or that runtime's spin: idle threads spin a bounded while
# (300000 polls, about a millisecond, libgomp's own default, made explicit) at the end
# of a parallel region, then sleep. Both ends were measured (BENCHMARKS.md, "Threads
# under load"): sleeping at once (OMP_WAIT_POLICY=passive) made each of a run's ~100
# regions wait for its threads to be woken, 25-35 us a region on a virtual machine
# (MobileNetV3-small 0.7 -> 4 ms); spinning without a bound wastes a core shared with
# another program. Kernels built by clang use LLVM's libomp, whose spin is
# KMP_BLOCKTIME in milliseconds (200 by default), so it gets the same millisecond. The
# runtimes read these when they start, so they are set before any library is loaded.
OPENMP_DEFAULTS = {"GOMP_SPINCOUNT": "300000", "KMP_BLOCKTIME": "1"}


def load_library(path: str | Path) -> ctypes.CDLL:
    """Load a library of Ember's kernels (or one linking them), with each of
    OPENMP_DEFAULTS put into this process's environment first where the user has set
    neither it nor OMP_WAIT_POLICY (a later change has no effect). The one way every
    Ember library is loaded."""
    if "OMP_WAIT_POLICY" not in os.environ:
        for name, value in OPENMP_DEFAULTS.items():
            os.environ.setdefault(name, value)
    return ctypes.CDLL(str(path))


class CLibrary:
    """The C functions of one loaded library (`library`, a ctypes.CDLL), with their
    signatures set; `source` names the library in errors."""

    def __init__(self, path: Path, source: str) -> None:
        try:
            library = load_library(path)
        except OSError as error:
            raise ArtifactError(f"{source}: cannot load the library {path}: {error}") from None
        for name, (restype, argtypes) in ABI_SIGNATURES.items():
            try:
                function = getattr(library, name)
            except AttributeError:
                raise ArtifactError(
                    f"{source}: {path.name} does not export {name}: {REBUILD_HINT}"
                ) from None
            function.restype, function.argtypes = restype, argtypes
        for name, (restype, argtypes) in OPTIONAL_SIGNATURES.items():
            function = getattr(library, name, None)
            if function is not None:
                function.restype, function.argtypes = restype, argtypes
        self.library = library

    def last_error(self) -> str:
        message = self.library.ember_last_error()
        return message.decode(errors="replace") if message else "no message"


def file_sha256(path: Path) -> str:
    """The hex SHA-256 of a file (an artifact member's checksum in mod.json)."""
    with path.open("rb") as file:
        return hashlib.file_digest(file, "sha256").hexdigest()
