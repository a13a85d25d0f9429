"""The measure helper process: `python -m ember.autoschedule.measure_worker` (started
by `LocalRunner`, never imported by the tuner).

For each request it loads the candidate's library, looks up its packed entry, and
either times it with `ember_measure` (c/measure.c, the C timing loop; with cold
weights it is told each argument's size and which are weights) or runs it once
and sends the outputs back; then it unloads the library, so thousands of candidates do
not pile up in this process. Arguments come from `reference_arguments`, cached by the
argument list (a task's candidates share one), outputs poisoned before a check run so
an element a kernel never writes shows up. A crash or hang here is the runner's to
notice: it kills and restarts this process.
"""

from __future__ import annotations

import ctypes
import sys
from collections import OrderedDict
from collections.abc import Sequence

import numpy as np

from ember.autoschedule.measure import ArgSpec
from ember.autoschedule.measure_abi import LibraryPins, load_timer, measure_status_text, unload
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.reference import poison_outputs, reference_arguments
from ember.autoschedule.runner import CheckRequest, TimeRequest, WorkerReply
from ember.autoschedule.worker import serve

# Argument lists kept for reuse: a tuning round measures one task at a time.
_CACHED_ARGUMENT_LISTS = 4


class Measurer:
    """What the helper does with each request."""

    def __init__(self, timer_path: str) -> None:
        self._measure = load_timer(timer_path)
        self._arguments: OrderedDict[tuple[ArgSpec, ...], list[np.ndarray]] = OrderedDict()
        self._pins = LibraryPins()

    def __call__(self, request: TimeRequest | CheckRequest) -> WorkerReply:
        try:
            library = ctypes.CDLL(request.path)
        except OSError as error:
            return WorkerReply(ErrorKind.RUNTIME, f"cannot load the candidate: {error}")
        self._pins.pin_dependencies(request.path)
        try:
            try:
                entry = library[request.symbol]
            except AttributeError:
                return WorkerReply(
                    ErrorKind.RUNTIME, f"{request.path} does not export {request.symbol}"
                )
            address = ctypes.cast(entry, ctypes.c_void_p).value or 0
            if isinstance(request, TimeRequest):
                return self._time(address, request)
            return self._check(address, request)
        except Exception as error:  # e.g. no memory for the arguments: this candidate's
            return WorkerReply(ErrorKind.RUNTIME, f"{type(error).__name__}: {error}")
        finally:
            unload(library)

    def _time(self, address: int, request: TimeRequest) -> WorkerReply:
        arrays = self._cached_arguments(request.args)
        pointers = _pointers(arrays)
        count = max(1, len(arrays))
        arg_bytes = (ctypes.c_int64 * count)(*(a.nbytes for a in arrays))
        arg_is_weight = (ctypes.c_int32 * count)(*(int(spec.is_weight) for spec in request.args))
        seconds = (ctypes.c_double * request.repeat)()
        kernel_status = ctypes.c_int32(0)
        status = self._measure(
            address,
            pointers,
            len(arrays),
            request.number,
            request.repeat,
            request.min_repeat_ms,
            int(request.flush_cache),
            int(request.cold_weights),
            arg_bytes,
            arg_is_weight,
            request.cooldown_ms,
            seconds,
            ctypes.byref(kernel_status),
        )
        if status != 0:
            return WorkerReply(ErrorKind.RUNTIME, measure_status_text(status, kernel_status.value))
        return WorkerReply(costs=tuple(seconds))

    def _check(self, address: int, request: CheckRequest) -> WorkerReply:
        # Fresh arrays: a faulty kernel may write its inputs, which must not spoil the
        # arrays later candidates are timed on.
        arrays = reference_arguments(request.args)
        poison_outputs(arrays, request.args)
        entry = ctypes.CFUNCTYPE(ctypes.c_int32, ctypes.POINTER(ctypes.c_void_p), ctypes.c_int32)(
            address
        )
        status = entry(_pointers(arrays), len(arrays))
        if status != 0:
            return WorkerReply(ErrorKind.RUNTIME, f"the kernel returned error status {status}")
        outputs = tuple(a for a, spec in zip(arrays, request.args, strict=True) if spec.is_output)
        return WorkerReply(outputs=outputs)

    def _cached_arguments(self, args: tuple[ArgSpec, ...]) -> list[np.ndarray]:
        if args in self._arguments:
            self._arguments.move_to_end(args)
        else:
            self._arguments[args] = reference_arguments(args)
            while len(self._arguments) > _CACHED_ARGUMENT_LISTS:
                self._arguments.popitem(last=False)
        return self._arguments[args]


def _pointers(arrays: Sequence[np.ndarray]) -> ctypes.Array[ctypes.c_void_p]:
    return (ctypes.c_void_p * max(1, len(arrays)))(*(a.ctypes.data for a in arrays))


def main() -> None:
    serve(Measurer(sys.argv[4]))


if __name__ == "__main__":
    main()
