"""How a helper process calls the candidate timer (`c/measure.c`) and handles candidate
libraries: `ember_measure` (`Timer`), a packed entry called once (`call_packed`), and
loading and unloading libraries without pulling the OpenMP runtime out from under its
threads.

Standard library only: the local measure helper (`measure_worker`) and a board's
device worker (`ember.rpc.device_worker`) both use it.
"""

from __future__ import annotations

import contextlib
import ctypes
from collections.abc import Iterator, Sequence
from pathlib import Path

from ember.runtime.abi import load_library

_STATUS_TEXT = {2: "bad timing settings", 3: "out of memory for the cache-flush buffer"}


class CandidateFailure(Exception):
    """A candidate could not be loaded or run; the message says why (the candidate's
    RUNTIME error)."""


class Timer:
    """The compiled timer at `path`: times a candidate's packed entry in C."""

    def __init__(self, path: str) -> None:
        # Candidates are timed as the runtime runs them (its OpenMP defaults).
        measure = load_library(path).ember_measure
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
        self._measure = measure

    def time(
        self, entry: int, addresses: Sequence[int], sizes: Sequence[int],
        is_weight: Sequence[bool], number: int, repeat: int, min_repeat_ms: float,
        flush_cache: bool, cold_weights: bool, cooldown_ms: float,
    ) -> tuple[float, ...]:  # fmt: skip
        """Seconds per call of each repeat of `entry` on the buffers at `addresses`
        (`sizes` bytes each; the weights evicted first with `cold_weights`, see
        c/measure.c); CandidateFailure when the kernel or the timer fails."""
        count = max(1, len(addresses))
        seconds = (ctypes.c_double * repeat)()
        kernel_status = ctypes.c_int32(0)
        status = self._measure(
            entry, pointer_array(addresses), len(addresses), number, repeat, min_repeat_ms,
            int(flush_cache), int(cold_weights), (ctypes.c_int64 * count)(*sizes),
            (ctypes.c_int32 * count)(*map(int, is_weight)), cooldown_ms, seconds,
            ctypes.byref(kernel_status),
        )  # fmt: skip
        if status == 1:
            raise CandidateFailure(f"the kernel returned error status {kernel_status.value}")
        if status != 0:
            raise CandidateFailure(_STATUS_TEXT.get(status, f"status {status}"))
        return tuple(seconds)


def call_packed(entry: int, addresses: Sequence[int]) -> int:
    """Call a kernel's packed entry once on the buffers at `addresses`; its status."""
    function = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32)
    return int(function(entry)(pointer_array(addresses), len(addresses)))


def pointer_array(addresses: Sequence[int]) -> ctypes.Array[ctypes.c_void_p]:
    # At least one slot: a zero-length ctypes array cannot be built portably.
    return (ctypes.c_void_p * max(1, len(addresses)))(*addresses)


class CandidateLoader:
    """Loads candidate libraries one at a time and unloads them after use (their
    files are deleted after the round, and a process that kept every candidate mapped
    would grow without bound), keeping the libraries they link (the OpenMP runtime,
    libm) loaded for good: unloading the last candidate would otherwise unload the
    OpenMP runtime under its idle pool threads, which then crash the process."""

    def __init__(self) -> None:
        self._pinned: set[str] = set()

    @contextlib.contextmanager
    def packed_entry(self, path: str, symbol: str) -> Iterator[int]:
        """The address of `symbol` in the library at `path`, loaded for the `with`
        block; CandidateFailure if it cannot be loaded or lacks the symbol."""
        try:
            library = load_library(path)
        except OSError as error:
            raise CandidateFailure(f"cannot load the candidate: {error}") from None
        self._pin_dependencies(path)
        try:
            try:
                entry = library[symbol]
            except AttributeError:
                raise CandidateFailure(f"{path} does not export {symbol}") from None
            yield ctypes.cast(entry, ctypes.c_void_p).value or 0
        finally:
            _unload(library)

    def _pin_dependencies(self, candidate: str) -> None:
        with open("/proc/self/maps", encoding="utf-8", errors="replace") as maps:
            paths = {line.split(maxsplit=5)[-1].strip() for line in maps if ".so" in line}
        for path in paths - self._pinned:
            if path.startswith("/") and path != candidate and ".so" in Path(path).name:
                with contextlib.suppress(OSError):  # not loadable again: not ours to pin
                    ctypes.CDLL(path)
        self._pinned |= paths


def _unload(library: ctypes.CDLL) -> None:
    import _ctypes

    dlclose = getattr(_ctypes, "dlclose", None)
    if dlclose is not None:
        dlclose(library._handle)
