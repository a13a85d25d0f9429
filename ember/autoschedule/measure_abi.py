"""How a helper process calls the candidate timer (`c/measure.c`) and handles candidate
libraries: the `ember_measure` signature, its status codes, and loading and unloading
libraries without pulling the OpenMP runtime out from under its threads.

Standard library only: the local measure helper (`measure_worker`) and a board's
device worker (`ember.rpc.device_worker`) both use it.
"""

from __future__ import annotations

import contextlib
import ctypes
from pathlib import Path
from typing import Any

_STATUS_TEXT = {2: "bad timing settings", 3: "out of memory for the cache-flush buffer"}


def load_timer(path: str) -> Any:
    """`ember_measure` of the compiled timer at `path`, with its signature set."""
    measure = ctypes.CDLL(path).ember_measure
    measure.restype = ctypes.c_int32
    measure.argtypes = (
        ctypes.c_void_p,  # the packed entry
        ctypes.POINTER(ctypes.c_void_p),
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_int32,
        ctypes.c_double,
        ctypes.c_int32,  # flush_cache
        ctypes.c_int32,  # cold_weights
        ctypes.POINTER(ctypes.c_int64),  # arg_bytes
        ctypes.POINTER(ctypes.c_int32),  # arg_is_weight
        ctypes.c_double,
        ctypes.POINTER(ctypes.c_double),
        ctypes.POINTER(ctypes.c_int32),
    )
    return measure


def measure_status_text(status: int, kernel_status: int) -> str:
    """What a non-zero `ember_measure` status means."""
    if status == 1:
        return f"the kernel returned error status {kernel_status}"
    return _STATUS_TEXT.get(status, f"status {status}")


class LibraryPins:
    """Keeps the libraries candidates link (the OpenMP runtime, libm) loaded for good.
    Unloading the last candidate would otherwise unload the OpenMP runtime under its
    idle pool threads, which then crash the process."""

    def __init__(self) -> None:
        self._pinned: set[str] = set()

    def pin_dependencies(self, candidate: str) -> None:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if ".so" in line}
        for path in paths - self._pinned:
            if path.startswith("/") and path != candidate and ".so" in Path(path).name:
                with contextlib.suppress(OSError):  # not loadable again: not ours to pin
                    ctypes.CDLL(path)
        self._pinned |= paths


def unload(library: ctypes.CDLL) -> None:
    """dlclose a candidate: its file is deleted after the round, and a process that
    kept every candidate mapped would grow without bound."""
    import _ctypes

    dlclose = getattr(_ctypes, "dlclose", None)
    if dlclose is not None:
        dlclose(library._handle)
