"""Running checks in a helper process that may hang or crash: the helper's side
(`handle_request`) and the fuzzer's (`CaseRunner`), and the classification of what a
check raised."""

from __future__ import annotations

import contextlib
import faulthandler
import os
import re
import sys
import threading
import traceback
import warnings
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path
from typing import IO

from ember.autoschedule import worker as worker_module
from ember.autoschedule.worker import START_TIMEOUT, Worker, WorkerCrashed, WorkerTimedOut
from ember.errors import CompileError, EmberError, GraphError, LoopIRError
from ember.testing.fuzz.check import CheckFunction, StageLog
from ember.testing.fuzz.mutations import Case

EMBER_ROOT = Path(__file__).resolve().parents[2]
# Frames of these files are the fuzzer's, not the code under test.
_PLUMBING = frozenset(
    {*Path(__file__).resolve().parent.glob("*.py"), Path(str(worker_module.__file__)).resolve()}
)
# EmberErrors only Ember's own mistakes raise, whatever the model (see errors.py).
INTERNAL_ERRORS = (GraphError, LoopIRError, CompileError)
# Stages where an EmberError is a fair answer to a bad model.
REJECTING_STAGES = ("import", "build")
WORKER_FLAG = "--fuzz-worker"
WORKER_MEMORY = 8 * 2**30  # the helper's address-space limit: a runaway allocation fails
GRACE = 3.0  # seconds past the timeout for the helper to write a hang's stack
RECYCLE_AFTER = 200  # cases per helper: each loaded library stays mapped until it exits


@dataclass(frozen=True, slots=True)
class Request:
    """What the fuzzer sends the helper: a case and the check to run on it."""

    check: CheckFunction
    case: Case
    timeout: float
    scratch: str  # the folder of the helper's trace and output files


@dataclass(frozen=True, slots=True)
class CaseResult:
    """One case's outcome; findings with the same `key` are one finding."""

    outcome: str
    stage: str = ""
    error_type: str = ""
    location: str = ""
    message: str = ""
    detail: str = ""
    checked: tuple[str, ...] = ()

    @property
    def key(self) -> tuple[str, str, str]:
        return (self.outcome, self.error_type, self.location)


def handle_request(request: Request) -> CaseResult:
    """Run one check (in the helper) and classify what it raised."""
    trace = _helper_setup(request.scratch)
    trace.seek(0)
    trace.truncate()
    os.ftruncate(1, 0)  # the helper's output (an append-only file): this case's only
    done = threading.Event()
    watchdog = threading.Thread(
        target=_write_stack_if_late, args=(done, threading.get_ident(), request.timeout, trace)
    )
    watchdog.start()
    # Reading a running thread's frames from faulthandler's own thread can crash the
    # process, so its dump is only the fallback for a check that holds the GIL (in C).
    faulthandler.dump_traceback_later(request.timeout + GRACE / 2, file=trace)
    log = StageLog()
    try:
        verdict = request.check(request.case, log)
    except Exception as error:
        return classify_error(error, log)
    finally:
        faulthandler.cancel_dump_traceback_later()
        done.set()
        watchdog.join()
    return CaseResult(verdict.outcome, log.stage, verdict.kind, verdict.location,
                      verdict.message, checked=tuple(log.checked))  # fmt: skip


def _write_stack_if_late(
    done: threading.Event, thread: int, timeout: float, trace: IO[str]
) -> None:
    """A hang's stack, written before the fuzzer kills the helper: `thread`'s frames,
    innermost first (as faulthandler writes them), unless `done` is set in time."""
    if done.wait(timeout):
        return
    frame = sys._current_frames().get(thread)
    faulthandler.cancel_dump_traceback_later()
    lines = [f'  File "{f.filename}", line {f.lineno} in {f.name}\n'
             for f in reversed(traceback.extract_stack(frame))]  # fmt: skip
    trace.write(f"Timeout ({timeout:g} s)! The checking thread's stack:\n{''.join(lines)}")
    trace.flush()


_HELPER_FILES: dict[str, IO[str]] = {}


def _helper_setup(scratch: str) -> IO[str]:
    """Once per helper: output to a file, fatal-signal stacks to the trace file, a
    memory limit, quiet."""
    if scratch in _HELPER_FILES:
        return _HELPER_FILES[scratch]
    import resource

    output = os.open(Path(scratch) / "helper-output.txt", os.O_WRONLY | os.O_CREAT | os.O_APPEND)
    for fd in (1, 2):
        os.dup2(output, fd)
    trace = open(Path(scratch) / "helper-trace.txt", "w+")  # noqa: SIM115 (lives as long)
    faulthandler.enable(trace, all_threads=False)
    with contextlib.suppress(ValueError, OSError):
        resource.setrlimit(resource.RLIMIT_AS, (WORKER_MEMORY, WORKER_MEMORY))
    quiet()
    _HELPER_FILES[scratch] = trace
    return trace


def quiet() -> None:
    """No Python warnings (opsets newer than tested) and no ONNX Runtime log lines
    (every refused model logs some)."""
    warnings.simplefilter("ignore")
    with contextlib.suppress(ImportError):
        import onnxruntime

        onnxruntime.set_default_logger_severity(3)


def classify_error(error: Exception, log: StageLog) -> CaseResult:
    """An exception escaping a check: "rejected", "internal_error" or "bug"."""
    if isinstance(error, EmberError):
        internal = isinstance(error, INTERNAL_ERRORS) or log.stage not in REJECTING_STAGES
        outcome = "internal_error" if internal else "rejected"
    else:
        outcome = "bug"
    frames = traceback.extract_tb(error.__traceback__)
    detail = "".join(traceback.format_exception(error))
    if isinstance(error, CompileError):
        detail += f"\ncompiler output:\n{error.stderr[-3000:]}"
    lines = str(error).strip().splitlines()
    return CaseResult(
        outcome,
        log.stage,
        type(error).__name__,
        innermost_ember_frame((frame.filename, frame.lineno or 0) for frame in frames),
        lines[0][:300] if lines else "",
        detail if outcome != "rejected" else "",
        tuple(log.checked),
    )


def innermost_ember_frame(frames: Iterable[tuple[str, int]]) -> str:
    """Where in Ember `frames` (outermost first) end, as "ember/x.py:LINE": the innermost
    frame in `ember/` outside the fuzzer and the helper plumbing; when there is none,
    the innermost frame of all, as "file.py:LINE"."""
    ember_frame = any_frame = ""
    for filename, line in frames:
        path = Path(filename).resolve()
        any_frame = f"{path.name}:{line}"
        if path.is_relative_to(EMBER_ROOT) and path not in _PLUMBING:
            ember_frame = f"{path.relative_to(EMBER_ROOT.parent)}:{line}"
    return ember_frame or any_frame


# -- the runner ----------------------------------------------------------------------------

_FRAME = re.compile(r'^\s*File "(?P<file>[^"]+)", line (?P<line>\d+)')


class CaseRunner:
    """Runs cases one at a time in a long-lived helper process, and a fresh one after a
    hang (killed after `timeout` seconds), a crash, or RECYCLE_AFTER cases."""

    def __init__(
        self, check: CheckFunction, timeout: float, scratch: Path, env: dict[str, str]
    ) -> None:
        self.check, self.timeout, self.scratch, self.env = check, timeout, scratch, env
        self._worker: Worker | None = None
        self._served = 0

    def run(self, case: Case) -> CaseResult:
        worker = self._worker or self._start()
        worker.send(Request(self.check, case, self.timeout, str(self.scratch)))
        try:
            result: CaseResult = worker.receive(self.timeout + GRACE)
        except WorkerTimedOut:
            return self._lost("hang", "timeout", f"no answer within {self.timeout:g} s")
        except WorkerCrashed as crash:
            if _read_text(self.scratch / "helper-trace.txt").startswith("Timeout"):
                # It died after the timeout: a hang (or a crash of the stack dump).
                return self._lost("hang", "timeout", f"{crash.reason} after the timeout")
            return self._lost("crash", crash.reason.replace("killed by ", ""), crash.reason)
        self._served += 1
        if self._served >= RECYCLE_AFTER:
            self.close()
        return result

    def _start(self) -> Worker:
        worker = Worker("ember.testing.fuzz", env=self.env, args=(WORKER_FLAG,))
        worker.wait_ready(START_TIMEOUT)
        self._worker, self._served = worker, 0
        return worker

    def _lost(self, outcome: str, error_type: str, reason: str) -> CaseResult:
        """The helper hung or died: where it was, from its faulthandler stack."""
        if self._worker is not None:
            self._worker.kill()
        self._worker = None
        trace = _read_text(self.scratch / "helper-trace.txt")
        frames = _main_thread_frames(trace)
        location = innermost_ember_frame(frames)
        if location.startswith("ember/testing/oracle.py") or any(
            "onnxruntime" in filename for filename, _ in frames[-1:]
        ):
            outcome = "oracle_failure"
        output = _read_text(self.scratch / "helper-output.txt")[-2000:]
        detail = f"{reason}\n\nstack:\n{trace}\nhelper output (end):\n{output}"
        return CaseResult(outcome, "unknown", error_type, location, reason, detail)

    def close(self) -> None:
        if self._worker is not None:
            self._worker.close()
            self._worker = None


def _read_text(path: Path) -> str:
    try:
        return path.read_text(errors="replace")
    except OSError:
        return ""


def _main_thread_frames(trace: str) -> list[tuple[str, int]]:
    """The frames (outermost first) of the thread that ran the check, from a
    faulthandler dump (innermost first, one block per thread)."""
    blocks = re.split(r"\n(?=(?:Current thread|Thread) 0x)", trace)
    block = next((b for b in blocks if "testing/fuzz/" in b), blocks[0] if blocks else "")
    frames = [(m["file"], int(m["line"])) for m in map(_FRAME.match, block.splitlines()) if m]
    return frames[::-1]


def helper_environment(cache: Path) -> dict[str, str]:
    """The helper imports what this process can (an injected check's module too), keeps
    its builds in `cache`, and runs kernels on one thread."""
    prefixes = {sys.prefix, sys.base_prefix}
    paths = [p for p in sys.path if p and not any(p.startswith(x) for x in prefixes)]
    return {
        "PYTHONPATH": os.pathsep.join(paths),
        "EMBER_CACHE_DIR": os.environ.get("EMBER_CACHE_DIR") or str(cache),
        "OMP_NUM_THREADS": "1",
    }
