"""A built library's C ABI through bare ctypes, for tests that check the library itself
(not the Python runtime that wraps it): create, run, benchmark, profile, errors."""

from __future__ import annotations

import ctypes
from collections.abc import Mapping, Sequence

import numpy as np

from ember.build import Library

_POINTERS = ctypes.POINTER(ctypes.c_void_p)


def pointers(arrays: Sequence[np.ndarray]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * max(len(arrays), 1))(*(array.ctypes.data for array in arrays))


class LibraryABI:
    """mod.so of `library` loaded with ctypes, with the ABI's signatures declared."""

    def __init__(self, library: Library) -> None:
        self.library = library
        self.so = so = ctypes.CDLL(str(library.so_path))
        so.ember_create.restype = ctypes.c_void_p
        so.ember_create.argtypes = [_POINTERS]
        so.ember_create_from_file.restype = ctypes.c_void_p
        so.ember_create_from_file.argtypes = [ctypes.c_char_p]
        so.ember_run.restype = ctypes.c_int32
        so.ember_run.argtypes = [ctypes.c_void_p, _POINTERS, _POINTERS]
        so.ember_benchmark.restype = ctypes.c_int32
        so.ember_benchmark.argtypes = [
            ctypes.c_void_p,
            _POINTERS,
            _POINTERS,
            ctypes.c_int32,
            ctypes.c_int32,
            ctypes.c_double,
            ctypes.c_int32,
            ctypes.POINTER(ctypes.c_double),
        ]
        so.ember_profile.restype = ctypes.c_int32
        so.ember_profile.argtypes = [
            ctypes.c_void_p,
            _POINTERS,
            _POINTERS,
            ctypes.c_int32,
            ctypes.POINTER(ctypes.c_double),
        ]
        so.ember_num_steps.restype = ctypes.c_int32
        for name in ("ember_step_name", "ember_step_kernel"):
            getattr(so, name).restype = ctypes.c_char_p
            getattr(so, name).argtypes = [ctypes.c_int32]
        so.ember_destroy.restype = None
        so.ember_destroy.argtypes = [ctypes.c_void_p]
        so.ember_target.restype = ctypes.c_char_p
        so.ember_last_error.restype = ctypes.c_char_p

    def last_error(self) -> str:
        return self.so.ember_last_error().decode()

    def param_arrays(self) -> list[np.ndarray]:
        params = self.library.params
        return [np.ascontiguousarray(params[e["name"]]) for e in self.library.metadata["params"]]

    def create(self, params: Sequence[np.ndarray] | None = None) -> int:
        arrays = self.param_arrays() if params is None else list(params)
        self._kept = arrays  # borrowed by the instance: must outlive it
        handle = self.so.ember_create(pointers(arrays))
        assert handle, self.last_error()
        return handle

    def output_arrays(self) -> list[np.ndarray]:
        return [np.empty(e["shape"], e["dtype"]) for e in self.library.metadata["outputs"]]

    def input_arrays(self, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        return [np.ascontiguousarray(feeds[e["name"]]) for e in self.library.metadata["inputs"]]

    def run(self, handle: int, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
        """The outputs in metadata order."""
        outputs = self.output_arrays()
        status = self.so.ember_run(handle, pointers(self.input_arrays(feeds)), pointers(outputs))
        assert status == 0, self.last_error()
        return outputs


def run_library(library: Library, feeds: Mapping[str, np.ndarray]) -> list[np.ndarray]:
    """Create an instance with the library's params, run it once (outputs in metadata
    order), destroy it."""
    abi = LibraryABI(library)
    handle = abi.create()
    try:
        return abi.run(handle, feeds)
    finally:
        abi.so.ember_destroy(handle)
