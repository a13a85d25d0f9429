"""`LocalBuilder`: lowers and compiles candidate States into shared libraries, in
parallel helper processes.

    with LocalBuilder(n_parallel=4, timeout=15) as builder:
        built = builder.build([MeasureInput(task, state) for state in candidates])
        ...                                           # run them, then
        release(built)                                # delete the libraries

Each candidate goes the one way every kernel does, `ember.backend.compile_kernel`
(lower, the target backend's passes, render, its toolchain with the flags every build
uses), into a library in the builder's private temporary directory. Not the
content-hash kernel cache: thousands of candidates would fill it, and `release`
deletes their files.

Lowering is pure Python, so the work is spread over `n_parallel` helper processes
(`build_worker`; started, not forked, see `ember.autoschedule.worker`), which live as
long as the builder. A candidate whose lowering raises is an INSTANTIATION result with
the error; a compiler failure a COMPILE result with the compiler's first error lines;
one that takes more than `timeout` seconds a TIMEOUT result (its helper, and the
compiler it ran, are killed and a fresh helper takes its place). `build` never raises
for a bad candidate.

`build_func` is the tutorials' choice of compiler: "default" (the target's, see
`ember.toolchain`) or "ndk" (the Android NDK's clang named by `$EMBER_NDK_CC`, what
the tuning tutorials' `use_ndk = True` selects). In Ember the target's triple picks
the compiler, so "ndk" needs an Android triple (`-mtriple=aarch64-linux-android`)
and says so for any other, rather than building with another compiler than asked;
a missing NDK compiler is an error when the builder is made, not a COMPILE result
for every candidate.
"""

from __future__ import annotations

import shutil
import tempfile
import time
import uuid
import weakref
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ember.autoschedule.measure import ArgSpec, BuildResult, MeasureInput
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.worker import (
    START_TIMEOUT,
    Worker,
    WorkerCrashed,
    WorkerTimedOut,
    wait_for_any,
)
from ember.backend import compile_kernel
from ember.device import host_cpu_count
from ember.errors import CompileError, EmberError, TargetError, ToolchainError
from ember.toolchain import ndk_compiler

WORKER_MODULE = "ember.autoschedule.build_worker"
# The kernel's C name; the packed entry is `candidate_packed`.
KERNEL_NAME = "candidate"
_ERROR_LINES = 12


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """Build `measure_input` into `<directory>/<name>.so` (to a helper)."""

    measure_input: MeasureInput
    directory: str
    name: str


def build_candidate(request: BuildRequest) -> BuildResult:
    """Lower, render and compile one candidate (`ember.backend.compile_kernel`, into
    the builder's directory, uncached); errors become results. Runs in a helper
    process; time_cost is filled in by the builder, which sees the whole time."""
    measure_input = request.measure_input
    library = Path(request.directory) / f"{request.name}.so"
    try:
        compiled = compile_kernel(
            measure_input.state, measure_input.task.target, KERNEL_NAME, path=library
        )
    except CompileError as error:
        status = f"{error.argv[0]} exited with status {error.returncode}"
        message = f"{status}:\n{_first_errors(error.stderr)}"
        return BuildResult(None, "", (), ErrorKind.COMPILE, message)
    except (ToolchainError, TargetError, OSError) as error:
        # No compiler, a backend these helpers do not know, a full disk: not the
        # candidate's fault, but it did not compile.
        return BuildResult(None, "", (), ErrorKind.COMPILE, str(error))
    except Exception as error:  # any other failure is the candidate's lowering
        message = f"{type(error).__name__}: {error}"
        return BuildResult(None, "", (), ErrorKind.INSTANTIATION, message)
    kernel = compiled.kernel
    # `lower` passes the DAG's inputs first, in order: position = input index.
    weights = measure_input.task.weight_inputs
    args = tuple(
        ArgSpec(tuple(int(n) for n in b.shape), b.dtype, b in kernel.outputs, i in weights)
        for i, b in enumerate(kernel.args)
    )
    return BuildResult(str(library), kernel.packed_symbol, args)


def _first_errors(stderr: str) -> str:
    """The compiler's output from its first error on, a few lines of it."""
    lines = stderr.splitlines()
    first = next((i for i, line in enumerate(lines) if "error" in line.lower()), 0)
    return "\n".join(lines[first : first + _ERROR_LINES])


# The compilers a LocalBuilder can be asked for (module docstring).
BUILD_FUNCS = ("default", "ndk")


class LocalBuilder:
    """Builds candidates in `n_parallel` helper processes (default: one per CPU); see
    the module docstring. Close it (or use it as a context manager) to stop the
    helpers and delete its temporary directory, after the built candidates ran."""

    def __init__(
        self, n_parallel: int | None = None, timeout: float = 15.0, build_func: str = "default"
    ) -> None:
        if build_func not in BUILD_FUNCS:
            raise EmberError(
                f"build_func={build_func!r} is unknown: use one of {', '.join(BUILD_FUNCS)}"
            )
        if build_func == "ndk":
            ndk_compiler("LocalBuilder(build_func='ndk') builds with the Android NDK")
        if n_parallel is not None and n_parallel < 1:
            raise EmberError(f"n_parallel={n_parallel} must be at least 1 (or None: one per CPU)")
        if not timeout > 0:
            raise EmberError(f"timeout={timeout} must be a positive number of seconds")
        self.n_parallel = n_parallel or host_cpu_count()
        self.timeout = float(timeout)
        self.build_func = build_func
        self._pool = _Pool(Path(tempfile.mkdtemp(prefix="ember-candidates-")))
        self._finalizer = weakref.finalize(self, self._pool.stop)

    @property
    def directory(self) -> Path:
        """Where the built libraries go (removed by close())."""
        return self._pool.directory

    def __enter__(self) -> LocalBuilder:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def close(self) -> None:
        """Stop the helpers and delete the temporary directory with every library in it."""
        self._finalizer()

    def build(self, inputs: Sequence[MeasureInput]) -> list[BuildResult]:
        """One result per candidate, in order; never raises for a bad candidate."""
        if self._pool.stopped:
            raise EmberError("this LocalBuilder is closed; create a new one")
        if self.build_func == "ndk":
            for measure_input in inputs:
                target = measure_input.task.target
                if not target.is_android:
                    raise TargetError(
                        f"LocalBuilder(build_func='ndk') builds with the Android NDK, but "
                        f"the task's target {target} is not an Android triple: use "
                        "-mtriple=aarch64-linux-android (or build_func='default')"
                    )
        results: list[BuildResult | None] = [None] * len(inputs)
        queue = deque(enumerate(inputs))
        running: dict[Worker, tuple[int, float]] = {}
        self._pool.grow(min(self.n_parallel, len(inputs)))
        try:
            while queue or running:
                for worker in self._pool.idle(running):
                    if not queue:
                        break
                    index, measure_input = queue.popleft()
                    request = BuildRequest(measure_input, str(self.directory), uuid.uuid4().hex)
                    worker.send(request)
                    running[worker] = (index, time.monotonic())
                for worker, index, result in self._collect(running):
                    del running[worker]
                    results[index] = result
        except BaseException:
            # Interrupted (Ctrl-C): a busy helper's late reply must not answer the
            # next build's request.
            for worker in running:
                worker.kill()
                self._pool.replace(worker)
            raise
        return [result for result in results if result is not None]

    def _collect(
        self, running: dict[Worker, tuple[int, float]]
    ) -> list[tuple[Worker, int, BuildResult]]:
        """Wait for a reply, a helper starting, or the first deadline; the finished."""
        now = time.monotonic()
        deadline = min((start + self.timeout for _, start in running.values()), default=None)
        wait_for = START_TIMEOUT if deadline is None else max(0.0, deadline - now)
        ready = wait_for_any([worker.connection for worker in self._pool.workers], wait_for)
        for worker in self._pool.starting():
            if worker.connection in ready:
                worker.wait_ready(0)
        if deadline is None and not ready:
            raise EmberError(f"no build helper started within {START_TIMEOUT:g} s")
        finished = []
        for worker, (index, start) in list(running.items()):
            if worker.connection in ready or time.monotonic() - start > self.timeout:
                finished.append((worker, index, self._finish(worker, start)))
        return finished

    def _finish(self, worker: Worker, start: float) -> BuildResult:
        """The result of `worker`'s candidate; replaces the helper if it died or hung."""
        try:
            result = worker.receive(0)
        except (WorkerTimedOut, WorkerCrashed) as error:
            self._pool.replace(worker)
            if isinstance(error, WorkerCrashed):
                reason = f"the build process died ({error.reason}) building it"
                seconds = time.monotonic() - start
                return BuildResult(None, "", (), ErrorKind.COMPILE, reason, seconds)
            return self._timeout(start)
        assert isinstance(result, BuildResult)
        if time.monotonic() - start > self.timeout:
            release_one(result)
            return self._timeout(start)
        return replace(result, time_cost=time.monotonic() - start)

    def _timeout(self, start: float) -> BuildResult:
        message = (
            f"building took longer than the builder's timeout of {self.timeout:g} s "
            "(lowering and compiling)"
        )
        return BuildResult(None, "", (), ErrorKind.TIMEOUT, message, time.monotonic() - start)


def release_one(result: BuildResult) -> None:
    if result.path is not None:
        Path(result.path).unlink(missing_ok=True)


class _Pool:
    """The builder's helper processes and their directory."""

    def __init__(self, directory: Path) -> None:
        self.directory = directory
        self.workers: list[Worker] = []
        self.stopped = False

    def grow(self, count: int) -> None:
        """Start helpers until there are `count` (they say "ready" later)."""
        while len(self.workers) < count:
            self.workers.append(Worker(WORKER_MODULE, {"OMP_NUM_THREADS": "1"}))

    def idle(self, running: dict[Worker, tuple[int, float]]) -> list[Worker]:
        return [w for w in self.workers if w.ready and w not in running]

    def starting(self) -> list[Worker]:
        return [w for w in self.workers if not w.ready]

    def replace(self, worker: Worker) -> None:
        """`worker` was killed (and reaped): start another in its place."""
        self.workers[self.workers.index(worker)] = Worker(WORKER_MODULE, {"OMP_NUM_THREADS": "1"})

    def stop(self) -> None:
        for worker in self.workers:
            worker.close()
        self.workers = []
        self.stopped = True
        shutil.rmtree(self.directory, ignore_errors=True)
