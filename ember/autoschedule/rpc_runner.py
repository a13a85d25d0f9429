"""`RPCRunner`: times compiled candidates on boards handed out by a tracker, several
boards at once.

    runner = RPCRunner("rasp4b-64", "127.0.0.1", 9190, n_parallel=4, cold_weights=True,
                       number=1, repeat=10)
    TuningOptions(runner=runner, ...)            # as a LocalRunner: same records, errors

The host builds the candidates (for the board's target); each board gets, once per
session, the timer (`c/measure.c` compiled for its target) and each argument list's
input bytes (`reference_arguments`, the same values as a local run), then per
candidate its library, a time request, and the library's removal. The board runs the
candidate in its helper process with the same timer loop as `LocalRunner`, so timings,
timing modes and error kinds are the same; a check run sends the outputs back and the
host compares them with the DAG's reference evaluation.

With N boards, N candidates are measured at once, one thread per board. A board that
drops off mid-measurement (its session fails, or does not answer within the timeout
and a margin) is given up, logged, and the candidate measured on another board; when
no board is left the runner asks the tracker for one, and a candidate that finds none
within `request_timeout` becomes a RUNTIME error: a lost board costs its candidates,
never the tuning run. Code for a board that cannot run it (another architecture, CPU
features it lacks) is refused before it is sent, with an EmberError.
"""

from __future__ import annotations

import hashlib
import itertools
import logging
import math
import queue
import threading
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path
from typing import Any

import numpy as np

from ember.autoschedule.measure import ArgSpec, BuildResult, MeasureInput, MeasureResult, Timing
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.reference import reference_arguments
from ember.autoschedule.runner import (
    CheckRequest,
    TimeRequest,
    TimingRunner,
    WorkerReply,
    _check_lengths,
    timer_source,
)
from ember.autoschedule.task import SearchTask
from ember.device import dtype_bytes
from ember.errors import EmberError
from ember.rpc.client import (
    RemoteSession,
    TargetMismatch,
    TrackerClient,
    check_compatible,
    device_notes,
)
from ember.rpc.protocol import RemoteError, RPCError, load_token
from ember.toolchain import compile_shared

log = logging.getLogger("ember.rpc")

# How many times a candidate is tried on another board when its board is lost.
_ATTEMPTS = 3
# How long the first round waits for each board after the first (see _acquire_boards).
_EXTRA_BOARD_GRACE = 3.0
_candidate_names = itertools.count()


class RPCRunner(TimingRunner):
    """Times candidates on the tracker's boards of `key`; see the module docstring.
    `n_parallel`: boards used at once (None: every board of the key the tracker has
    when the first round starts). `request_timeout`: seconds to wait for a board."""

    def __init__(
        self,
        key: str,
        host: str,
        port: int,
        priority: int = 1,
        n_parallel: int | None = None,
        timeout: float = 10.0,
        number: int = 3,
        repeat: int = 1,
        min_repeat_ms: float = 100.0,
        enable_cpu_cache_flush: bool = False,
        cooldown_interval: float = 0.0,
        cold_weights: bool = False,
        token_file: str | Path | None = None,
        request_timeout: float = 120.0,
    ) -> None:
        super().__init__(
            number, repeat, min_repeat_ms, timeout, enable_cpu_cache_flush, cooldown_interval,
            cold_weights,
        )  # fmt: skip
        if n_parallel is not None and n_parallel < 1:
            raise EmberError(f"n_parallel={n_parallel} must be at least 1 (boards at once)")
        self.key = key
        self.priority = priority
        self.n_parallel = n_parallel
        self.request_timeout = float(request_timeout)
        self.tracker = TrackerClient(host, port, load_token(token_file))
        self._idle: queue.Queue[_Board] = queue.Queue()
        self._boards: list[_Board] = []
        self._lock = threading.Lock()
        self._acquired = False

    @classmethod
    def for_timing(
        cls, timing: Timing, key: str, host: str, port: int, number: int | None = None,
        repeat: int | None = None, min_repeat_ms: float | None = None, **options: Any,
    ) -> RPCRunner:  # fmt: skip
        """A runner that times as `timing` says (see `LocalRunner.for_timing`)."""
        settings = cls.timing_settings(timing, number, repeat, min_repeat_ms)
        return cls(key, host, port, **settings, **options)

    @property
    def boards(self) -> int:
        """Boards held now."""
        with self._lock:
            return len(self._boards)

    def close(self) -> None:
        """End every board's session (the boards are free for others)."""
        with self._lock:
            boards, self._boards = self._boards, []
        for board in boards:
            board.session.close()
        self._idle = queue.Queue()
        self.tracker.close()

    def run(
        self, inputs: Sequence[MeasureInput], build_results: Sequence[BuildResult]
    ) -> list[MeasureResult]:
        """One result per candidate, in order, measured on all boards at once."""
        _check_lengths(inputs, build_results)
        if not inputs:
            return []
        self._acquire_boards()
        workers = max(1, self.boards)
        with ThreadPoolExecutor(workers, thread_name_prefix="rpc-runner") as pool:
            return list(pool.map(self._time, inputs, build_results))

    def _acquire_boards(self) -> None:
        """Hold up to n_parallel boards: wait for the first, take others only if free."""
        wanted = self.n_parallel
        if wanted is None:
            counts = self.tracker.summary()["keys"].get(self.key, {})
            wanted = max(1, int(counts.get("total", 0)))
        # Boards another runner just closed report themselves free a moment later: the
        # first time, wait a little for each; later rounds take only free ones.
        grace = 0.0 if self._acquired else min(self.request_timeout, _EXTRA_BOARD_GRACE)
        self._acquired = True
        while self.boards < wanted:
            wait = self.request_timeout if self.boards == 0 else grace
            try:
                session = self.tracker.request(self.key, self.priority, wait)
            except RPCError as error:
                if self.boards == 0:
                    raise EmberError(f"RPCRunner found no board: {error}") from None
                return
            self._idle.put(self._hold(session))

    def _hold(self, session: RemoteSession) -> _Board:
        """A board the runner now holds (idle or not is the caller's to say)."""
        board = _Board(session)
        with self._lock:
            self._boards.append(board)
        log.info("RPCRunner: measuring on %s (%d boards)", session.where, self.boards)
        return board

    def _call(self, task: SearchTask, request: TimeRequest | CheckRequest) -> WorkerReply:
        lost: list[str] = []
        for _ in range(_ATTEMPTS):
            board = self._take_board()
            if board is None:
                break
            try:
                reply = board.measure(task, request, self)
            except RemoteError as error:  # the board refused this candidate
                self._idle.put(board)
                return WorkerReply(ErrorKind.RUNTIME, str(error))
            except RPCError as error:
                self._give_up(board, error)
                lost.append(str(error))
                continue
            except TargetMismatch:
                self._idle.put(board)
                raise
            except Exception as error:  # this candidate's (e.g. its library is gone)
                self._idle.put(board)
                return WorkerReply(ErrorKind.RUNTIME, f"{type(error).__name__}: {error}")
            self._idle.put(board)
            return reply
        reason = "; ".join(lost) or f"no board of key {self.key!r} is available"
        return WorkerReply(ErrorKind.RUNTIME, f"not measured: {reason}")

    def _take_board(self) -> _Board | None:
        """An idle board; a new one from the tracker when none is left."""
        while True:
            if self.boards > 0:
                try:
                    return self._idle.get(timeout=1.0)
                except queue.Empty:
                    continue  # every board is busy with another candidate
            try:
                session = self.tracker.request(self.key, self.priority, self.request_timeout)
            except RPCError as error:
                log.warning("RPCRunner: no board of key %s: %s", self.key, error)
                return None
            return self._hold(session)

    def _give_up(self, board: _Board, error: RPCError) -> None:
        log.warning("RPCRunner: lost %s: %s", board.session.where, error)
        with self._lock:
            if board in self._boards:
                self._boards.remove(board)
        board.session.channel.close()


class _Board:
    """One board's session and what was uploaded to it."""

    def __init__(self, session: RemoteSession) -> None:
        self.session = session
        self.timers: dict[str, str] = {}  # target -> the timer's name on the board
        self.arguments: dict[tuple[str, tuple[ArgSpec, ...]], str] = {}
        self.checked_targets: set[str] = set()

    def measure(
        self, task: SearchTask, request: TimeRequest | CheckRequest, runner: RPCRunner
    ) -> WorkerReply:
        """Time or check one candidate on this board; RPCError if the board is lost."""
        self._check_target(task)
        session = self.session
        name = f"candidate-{next(_candidate_names)}.so"
        library = session.upload(Path(request.path), name, runner.timeout)
        header: dict[str, Any] = {
            "library": library,
            "symbol": request.symbol,
            "arguments": self._arguments(task, request.args),
            "args": [_arg_entry(spec) for spec in request.args],
            "threads": task.hardware_params.num_cores,
        }
        if isinstance(request, TimeRequest):
            header.update(
                op="time", timer=self._timer(task), number=request.number,
                repeat=request.repeat, min_repeat_ms=request.min_repeat_ms,
                flush_cache=request.flush_cache, cold_weights=request.cold_weights,
                cooldown_ms=request.cooldown_ms,
            )  # fmt: skip
        else:
            header["op"] = "check"
        try:
            reply, blobs = session.call(header, timeout=runner.timeout)
        finally:
            if not session.channel.closed:  # a lost board's own error is the one to tell
                session.remove(library, runner.timeout)
        if "failure" in reply:
            kind = ErrorKind(reply["failure"])
            return WorkerReply(kind, f"on {session.where}: {reply.get('message', '')}")
        if isinstance(request, TimeRequest):
            return WorkerReply(costs=tuple(float(c) for c in reply["costs"]))
        return WorkerReply(outputs=tuple(_outputs(blobs, request.args)))

    def _check_target(self, task: SearchTask) -> None:
        target = str(task.target)
        if target not in self.checked_targets:
            from ember.runtime.module import required_cpu_features

            what = f"code for task {task.workload_key[:24]}..."
            check_compatible(target, required_cpu_features(task.target), self.session.device,
                             what)  # fmt: skip
            for note in device_notes(target, self.session.device):
                log.warning("RPCRunner: %s: %s", self.session.where, note)
            self.checked_targets.add(target)

    def _timer(self, task: SearchTask) -> str:
        target = str(task.target)
        if target not in self.timers:
            path = compile_shared([timer_source()], target)
            self.timers[target] = self.session.upload(path, f"timer-{path.stem[-16:]}.so")
        return self.timers[target]

    def _arguments(self, task: SearchTask, args: tuple[ArgSpec, ...]) -> str:
        key = (task.workload_key, args)
        if key not in self.arguments:
            arrays = reference_arguments(args)
            contents = b"".join(
                a.tobytes() for a, spec in zip(arrays, args, strict=True) if not spec.is_output
            )
            digest = hashlib.sha256(repr(key).encode()).hexdigest()[:16]
            self.arguments[key] = self.session.upload(contents, f"arguments-{digest}.bin")
        return self.arguments[key]


def _arg_entry(spec: ArgSpec) -> list[Any]:
    nbytes = math.prod(spec.shape) * dtype_bytes(spec.dtype)
    return [nbytes, spec.is_output, spec.is_weight, spec.dtype]


def _outputs(blobs: Sequence[bytes], args: Sequence[ArgSpec]) -> list[np.ndarray]:
    specs = [spec for spec in args if spec.is_output]
    return [
        np.frombuffer(blob, spec.dtype).reshape(spec.shape)
        for blob, spec in zip(blobs, specs, strict=True)
    ]
