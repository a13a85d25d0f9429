"""A compiled kernel as a Python callable over NumPy arrays (this machine only).

    kernel = compile_kernel(state, Target("llvm"), "conv").load()
    kernel(a, b, out)           # checks shapes, dtypes, contiguity and aliasing; ctypes

The library's packed entry point (`int32_t name_packed(void* const* args, int32_t n)`)
takes one pointer per buffer argument of the kernel's PrimFunc, in order.
"""

from __future__ import annotations

import ctypes
from collections.abc import Sequence
from pathlib import Path

import numpy as np

from ember.codegen.c import entry_symbols
from ember.codegen.renderer import output_args
from ember.errors import KernelCallError
from ember.loop.ir import Buffer, PrimFunc
from ember.runtime.abi import load_library


class Kernel:
    """A compiled kernel: call it with one C-contiguous NumPy array per buffer argument
    of its PrimFunc, in order; it writes its outputs in place."""

    def __init__(
        self,
        func: PrimFunc,
        path: Path,
        source: str | None = None,
        *,
        packed_symbol: str | None = None,
        outputs: tuple[Buffer, ...] | None = None,
    ) -> None:
        self.func = func
        self.path = Path(path)
        self.source = source
        self.outputs = output_args(func) if outputs is None else outputs
        self._library = load_library(self.path)
        packed = packed_symbol or entry_symbols(func.name)[1]
        try:
            self._entry = getattr(self._library, packed)
        except AttributeError:
            raise KernelCallError(
                f"{self.path} has no entry point {packed}: it was not built from "
                f"kernel '{func.name}'"
            ) from None
        self._entry.argtypes = (ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32)
        self._entry.restype = ctypes.c_int32

    def __call__(self, *arrays: np.ndarray) -> None:
        self.check_args(arrays)
        pointers = (ctypes.c_void_p * max(len(arrays), 1))(*(a.ctypes.data for a in arrays))
        status = self._entry(pointers, len(arrays))
        if status != 0:
            raise KernelCallError(f"kernel '{self.func.name}' returned error {status}")

    def check_args(self, arrays: Sequence[np.ndarray]) -> None:
        func = self.func
        if len(arrays) != len(func.args):
            names = ", ".join(b.name for b in func.args)
            raise KernelCallError(
                f"kernel '{func.name}' takes {len(func.args)} arrays ({names}), got {len(arrays)}"
            )
        for position, (buffer, array) in enumerate(zip(func.args, arrays, strict=True)):
            where = f"argument {position} ('{buffer.name}') of kernel '{func.name}'"
            if not isinstance(array, np.ndarray):
                raise KernelCallError(f"{where} must be a NumPy array, not {type(array).__name__}")
            expected = f"{buffer.dtype} array of shape {tuple(buffer.shape)}"
            if array.dtype != np.dtype(buffer.dtype) or array.shape != tuple(buffer.shape):
                raise KernelCallError(
                    f"{where}: expected a {expected}, got a {array.dtype} array of shape "
                    f"{array.shape}"
                )
            if not array.flags.c_contiguous:
                raise KernelCallError(
                    f"{where} is not C-contiguous: pass np.ascontiguousarray(...) of it"
                )
            if buffer in self.outputs:
                self._check_output(where, position, array, arrays)

    def _check_output(
        self, where: str, position: int, array: np.ndarray, arrays: Sequence[np.ndarray]
    ) -> None:
        if not array.flags.writeable:
            raise KernelCallError(f"{where} is an output but the array is read-only")
        for other_position, other in enumerate(arrays):
            if other_position != position and np.may_share_memory(array, other):
                raise KernelCallError(
                    f"{where} is an output and overlaps argument {other_position}: "
                    "kernels assume their arrays do not alias; pass a separate array"
                )
