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

import sys
from collections import OrderedDict

import numpy as np

from ember.autoschedule.measure import ArgSpec
from ember.autoschedule.measure_abi import CandidateFailure, CandidateLoader, Timer, call_packed
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.reference import poison_outputs, reference_arguments
from ember.autoschedule.runner import CheckRequest, TimeRequest, WorkerReply
from ember.autoschedule.worker import serve

# Argument lists kept for reuse: a tuning round measures one task at a time.
_CACHED_ARGUMENT_LISTS = 4


class Measurer:
    """What the helper does with each request."""

    def __init__(self, timer_path: str) -> None:
        self._timer = Timer(timer_path)
        self._arguments: OrderedDict[tuple[ArgSpec, ...], list[np.ndarray]] = OrderedDict()
        self._candidates = CandidateLoader()

    def __call__(self, request: TimeRequest | CheckRequest) -> WorkerReply:
        try:
            with self._candidates.packed_entry(request.path, request.symbol) as entry:
                if isinstance(request, TimeRequest):
                    return self._time(entry, request)
                return self._check(entry, request)
        except CandidateFailure as failure:
            return WorkerReply(ErrorKind.RUNTIME, str(failure))
        except Exception as error:  # e.g. no memory for the arguments: this candidate's
            return WorkerReply(ErrorKind.RUNTIME, f"{type(error).__name__}: {error}")

    def _time(self, entry: int, request: TimeRequest) -> WorkerReply:
        arrays = self._cached_arguments(request.args)
        costs = self._timer.time(
            entry, [a.ctypes.data for a in arrays], [a.nbytes for a in arrays],
            [spec.is_weight for spec in request.args], request.number, request.repeat,
            request.min_repeat_ms, request.flush_cache, request.cold_weights,
            request.cooldown_ms,
        )  # fmt: skip
        return WorkerReply(costs=costs)

    def _check(self, entry: int, request: CheckRequest) -> WorkerReply:
        # Fresh arrays: a faulty kernel may write its inputs, which must not spoil the
        # arrays later candidates are timed on.
        arrays = reference_arguments(request.args)
        poison_outputs(arrays, request.args)
        status = call_packed(entry, [a.ctypes.data for a in arrays])
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


def main() -> None:
    serve(Measurer(sys.argv[4]))


if __name__ == "__main__":
    main()
