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

from ember.autoschedule.measure_abi import (
    CandidateFailure,
    CandidateLoader,
    Timer,
    call_packed,
    pointer_array,
)
from ember.autoschedule.worker import serve
from ember.device import dtype_bytes
from ember.errors import EmberError
from ember.runtime.abi import (
    ALIGNMENT,
    LIBRARY_FILE,
    METADATA_FILE,
    PARAMS_FILE,
    CLibrary,
    TensorSpec,
)

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
        folder = Path(directory)
        self.metadata = json.loads((folder / METADATA_FILE).read_text(encoding="utf-8"))
        self.abi = CLibrary(folder / LIBRARY_FILE, directory)
        library = self.abi.library
        self.handle = library.ember_create_from_file(os.fsencode(folder / PARAMS_FILE))
        if not self.handle:
            raise EmberError(f"cannot create the network's instance: {self.abi.last_error()}")
        self.inputs = [Buffer(_tensor(t).nbytes) for t in self.metadata["inputs"]]
        self.outputs = [Buffer(_tensor(t).nbytes) for t in self.metadata["outputs"]]
        self.input_pointers = pointer_array([b.address for b in self.inputs])
        self.output_pointers = pointer_array([b.address for b in self.outputs])

    def set_inputs(self, blobs: Sequence[bytes]) -> None:
        if len(blobs) != len(self.inputs) or any(
            len(b) != i.nbytes for b, i in zip(blobs, self.inputs, strict=True)
        ):
            raise EmberError("the inputs sent do not match the network's input sizes")
        for buffer, blob in zip(self.inputs, blobs, strict=True):
            ctypes.memmove(buffer.address, blob, buffer.nbytes)


class DeviceWorker:
    """What the helper does with each request (a dict with "op"); replies are dicts
    with "ok" or with "failure" (an ErrorKind value) and "message"."""

    def __init__(self) -> None:
        self._timers: dict[tuple[str, int, int], Timer] = {}
        self._arguments: OrderedDict[tuple[str, int, int], bytes] = OrderedDict()
        self._artifacts: dict[str, _Artifact] = {}
        self._candidates = CandidateLoader()

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
        try:
            with self._candidates.packed_entry(request["library"], request["symbol"]) as entry:
                buffers = self._buffers(request)
                if request["op"] == "time":
                    return self._time(entry, buffers, request)
                return self._check(entry, buffers, request)
        except CandidateFailure as failure:
            return {"failure": "runtime", "message": str(failure)}

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
        key = _file_identity(path)
        if key in self._arguments:
            self._arguments.move_to_end(key)
        else:
            with open(path, "rb") as stream:
                self._arguments[key] = stream.read()
            while len(self._arguments) > _CACHED_ARGUMENT_FILES:
                self._arguments.popitem(last=False)
        return self._arguments[key]

    def _time(self, entry: int, buffers: list[Buffer], request: Reply) -> Reply:
        key = _file_identity(request["timer"])
        if key not in self._timers:
            self._timers[key] = Timer(request["timer"])
        costs = self._timers[key].time(
            entry, [b.address for b in buffers], [b.nbytes for b in buffers],
            [bool(a[2]) for a in request["args"]], request["number"], request["repeat"],
            request["min_repeat_ms"], request["flush_cache"], request["cold_weights"],
            request["cooldown_ms"],
        )  # fmt: skip
        return {"ok": True, "costs": list(costs)}

    def _check(self, entry: int, buffers: list[Buffer], request: Reply) -> Reply:
        status = call_packed(entry, [b.address for b in buffers])
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


def _tensor(entry: dict[str, Any]) -> TensorSpec:
    """A tensor of mod.json's inputs or outputs."""
    return TensorSpec(
        str(entry["name"]), tuple(int(d) for d in entry["shape"]), str(entry["dtype"])
    )


def _file_identity(path: str) -> tuple[str, int, int]:
    """What caches key a file by: an upload under the same name is a new file."""
    status = os.stat(path)
    return path, status.st_ino, status.st_mtime_ns


def main() -> None:
    serve(DeviceWorker())


if __name__ == "__main__":
    main()
