"""The board's helper process: `python -m ember.rpc.device_worker` (started by a device
server's session, never imported by it), where uploaded code runs.

A session hands it requests over a pipe (`ember.autoschedule.worker`): time a kernel
candidate with the uploaded timer (`c/measure.c`, compiled for the board on the host)
on the argument bytes the host uploaded, run a candidate once and send its outputs
back, or load an artifact's `mod.so` and run, benchmark or profile it in C. A
crash or hang here kills this process only; the session notices, reports it as the
candidate's error and starts another.

Standard library only (no NumPy on a board): buffers are ctypes arrays aligned to
`ALIGNMENT`, filled from and read back to bytes.
"""

from __future__ import annotations

import ctypes
import json
import math
import os
import struct
from collections import OrderedDict
from collections.abc import Sequence
from pathlib import Path
from typing import Any

from ember.autoschedule.measure_abi import LibraryPins, load_timer, measure_status_text, unload
from ember.autoschedule.worker import serve
from ember.device import dtype_bytes
from ember.errors import EmberError
from ember.runtime.abi import ALIGNMENT, CLibrary

Reply = dict[str, Any]
_CACHED_ARGUMENT_FILES = 4
# What an output holds before a check run: a value no correct kernel leaves (NaN, the
# largest integer), so an element the candidate never writes is a wrong answer.
_POISON = {
    "float16": struct.pack("<H", 0x7E00),
    "float32": struct.pack("<f", math.nan),
    "float64": struct.pack("<d", math.nan),
    "bool": b"\x01",
}


class Buffer:
    """`nbytes` of memory starting on an ALIGNMENT boundary (at least one byte)."""

    def __init__(self, nbytes: int, contents: bytes | None = None) -> None:
        self.nbytes = nbytes
        self._raw = ctypes.create_string_buffer(max(nbytes, 1) + ALIGNMENT)
        self.address = -ctypes.addressof(self._raw) % ALIGNMENT + ctypes.addressof(self._raw)
        if contents is not None:
            ctypes.memmove(self.address, contents, nbytes)

    def fill(self, pattern: bytes) -> None:
        if self.nbytes:
            data = pattern * (self.nbytes // len(pattern))
            ctypes.memmove(self.address, data, len(data))

    def read(self) -> bytes:
        return ctypes.string_at(self.address, self.nbytes)


def _pointers(buffers: Sequence[Buffer]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * max(1, len(buffers)))(*(b.address for b in buffers))


def poison_pattern(dtype: str) -> bytes:
    """One element of the check-run poison for `dtype`."""
    if dtype in _POISON:
        return _POISON[dtype]
    size = dtype_bytes(dtype)
    largest = (1 << (8 * size - (0 if dtype.startswith("uint") else 1))) - 1
    return largest.to_bytes(size, "little")


class _Artifact:
    """A loaded `mod.so` with one instance, its params read by the C loader."""

    def __init__(self, directory: str) -> None:
        with open(f"{directory}/mod.json", encoding="utf-8") as stream:
            self.metadata = json.load(stream)
        self.abi = CLibrary(Path(directory, "mod.so"), directory)
        library = self.abi.library
        self.handle = library.ember_create_from_file(f"{directory}/mod.params".encode())
        if not self.handle:
            raise EmberError(f"cannot create the network's instance: {self.abi.last_error()}")
        self.inputs = [Buffer(_nbytes(t)) for t in self.metadata["inputs"]]
        self.outputs = [Buffer(_nbytes(t)) for t in self.metadata["outputs"]]
        self.input_pointers = _pointers(self.inputs)
        self.output_pointers = _pointers(self.outputs)

    def set_inputs(self, blobs: Sequence[bytes]) -> None:
        if len(blobs) != len(self.inputs) or any(
            len(b) != i.nbytes for b, i in zip(blobs, self.inputs, strict=True)
        ):
            raise EmberError("the inputs sent do not match the network's input sizes")
        for buffer, blob in zip(self.inputs, blobs, strict=True):
            ctypes.memmove(buffer.address, blob, buffer.nbytes)


def _nbytes(tensor: dict[str, Any]) -> int:
    return math.prod(int(d) for d in tensor["shape"]) * dtype_bytes(str(tensor["dtype"]))


class DeviceWorker:
    """What the helper does with each request (a dict with "op"); replies are dicts
    with "ok" or with "failure" (an ErrorKind value) and "message"."""

    def __init__(self) -> None:
        self._timers: dict[tuple[str, int, int], Any] = {}
        self._arguments: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
        self._artifacts: dict[str, _Artifact] = {}
        self._pins = LibraryPins()

    def __call__(self, request: Reply) -> Reply:
        try:
            op = request["op"]
            if op in ("time", "check"):
                return self._kernel(request)
            artifact = self._artifact(request["directory"])
            if op == "load":
                return {"ok": True, "metadata": artifact.metadata}
            artifact.set_inputs(request["inputs"])
            return getattr(self, f"_{op}")(artifact, request)
        except Exception as error:  # this request's failure, never the helper's
            return {"failure": "runtime", "message": f"{type(error).__name__}: {error}"}

    # -- kernels ------------------------------------------------------------------------

    def _kernel(self, request: Reply) -> Reply:
        path = request["library"]
        try:
            library = ctypes.CDLL(path)
        except OSError as error:
            return {"failure": "runtime", "message": f"cannot load the candidate: {error}"}
        self._pins.pin_dependencies(path)
        try:
            try:
                entry = library[request["symbol"]]
            except AttributeError:
                return {"failure": "runtime", "message": f"the candidate does not export "
                        f"{request['symbol']}"}  # fmt: skip
            address = ctypes.cast(entry, ctypes.c_void_p).value or 0
            buffers = self._buffers(request)
            if request["op"] == "time":
                return self._time(address, buffers, request)
            return self._check(address, buffers, request)
        finally:
            unload(library)

    def _buffers(self, request: Reply) -> list[Buffer]:
        """One buffer per argument: inputs from the uploaded argument file (in order),
        outputs zeroed (a time run) or poisoned (a check run)."""
        contents = self._argument_bytes(request["arguments"])
        buffers, offset = [], 0
        for nbytes, is_output, _, dtype in request["args"]:
            if is_output:
                buffer = Buffer(nbytes)
                if request["op"] == "check":
                    buffer.fill(poison_pattern(dtype))
            else:
                if offset + nbytes > len(contents):
                    raise EmberError("the argument file is shorter than the arguments")
                buffer = Buffer(nbytes, contents[offset : offset + nbytes])
                offset += nbytes
            buffers.append(buffer)
        return buffers

    def _argument_bytes(self, path: str) -> bytes:
        # By file identity, not name: an upload under the same name is a new file.
        status = os.stat(path)
        key = (path, status.st_ino, status.st_mtime_ns)
        if key in self._arguments:
            self._arguments.move_to_end(key)
        else:
            with open(path, "rb") as stream:
                self._arguments[key] = stream.read()
            while len(self._arguments) > _CACHED_ARGUMENT_FILES:
                self._arguments.popitem(last=False)
        return self._arguments[key]

    def _time(self, address: int, buffers: list[Buffer], request: Reply) -> Reply:
        status = os.stat(request["timer"])
        timer = (request["timer"], status.st_ino, status.st_mtime_ns)
        if timer not in self._timers:
            self._timers[timer] = load_timer(request["timer"])
        count = max(1, len(buffers))
        arg_bytes = (ctypes.c_int64 * count)(*(b.nbytes for b in buffers))
        is_weight = (ctypes.c_int32 * count)(*(int(a[2]) for a in request["args"]))
        seconds = (ctypes.c_double * request["repeat"])()
        kernel_status = ctypes.c_int32(0)
        status = self._timers[timer](
            address, _pointers(buffers), len(buffers), request["number"], request["repeat"],
            request["min_repeat_ms"], int(request["flush_cache"]), int(request["cold_weights"]),
            arg_bytes, is_weight, request["cooldown_ms"], seconds, ctypes.byref(kernel_status),
        )  # fmt: skip
        if status != 0:
            message = measure_status_text(status, kernel_status.value)
            return {"failure": "runtime", "message": message}
        return {"ok": True, "costs": list(seconds)}

    def _check(self, address: int, buffers: list[Buffer], request: Reply) -> Reply:
        entry = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32)(
            address
        )
        status = entry(_pointers(buffers), len(buffers))
        if status != 0:
            return {"failure": "runtime", "message": f"the kernel returned error status {status}"}
        outputs = [b.read() for b, a in zip(buffers, request["args"], strict=True) if a[1]]
        return {"ok": True, "outputs": outputs}

    # -- artifacts ----------------------------------------------------------------------

    def _artifact(self, directory: str) -> _Artifact:
        if directory not in self._artifacts:
            self._artifacts[directory] = _Artifact(directory)
        return self._artifacts[directory]

    def _run(self, artifact: _Artifact, request: Reply) -> Reply:
        status = artifact.abi.library.ember_run(
            artifact.handle, artifact.input_pointers, artifact.output_pointers
        )
        if status != 0:
            return {"failure": "runtime", "message": f"run failed: {artifact.abi.last_error()}"}
        return {"ok": True, "outputs": [b.read() for b in artifact.outputs]}

    def _benchmark(self, artifact: _Artifact, request: Reply) -> Reply:
        seconds = (ctypes.c_double * request["repeat"])()
        status = artifact.abi.library.ember_benchmark(
            artifact.handle, artifact.input_pointers, artifact.output_pointers,
            request["number"], request["repeat"], float(request["min_repeat_ms"]),
            int(request["cache_flush"]), seconds,
        )  # fmt: skip
        if status != 0:
            return {"failure": "runtime", "message": f"benchmark failed: "
                    f"{artifact.abi.last_error()}"}  # fmt: skip
        return {"ok": True, "costs": list(seconds)}

    def _profile(self, artifact: _Artifact, request: Reply) -> Reply:
        library = artifact.abi.library
        count = library.ember_num_steps()
        seconds = (ctypes.c_double * max(count, 1))()
        status = library.ember_profile(
            artifact.handle, artifact.input_pointers, artifact.output_pointers,
            request["repeat"], seconds,
        )  # fmt: skip
        if status != 0:
            return {"failure": "runtime", "message": f"profile failed: {artifact.abi.last_error()}"}
        names = [(library.ember_step_name(i) or b"").decode() for i in range(count)]
        kernels = [(library.ember_step_kernel(i) or b"").decode() for i in range(count)]
        return {"ok": True, "seconds": list(seconds[:count]), "names": names, "kernels": kernels}


def main() -> None:
    serve(DeviceWorker())


if __name__ == "__main__":
    main()
