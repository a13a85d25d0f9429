"""`LocalBuilder`: lowers and compiles candidate States into shared libraries, in
parallel helper processes.

    with LocalBuilder(n_parallel=4, timeout=15) as builder:
        built = builder.build([MeasureInput(task, state) for state in candidates])
        ...                                           # run them, then
        release(built)                                # delete the libraries

Each candidate goes the way every kernel does (lower, the target backend's passes,
render, its toolchain with the flags every build uses), into a library in the
builder's private temporary directory. Not the content-hash kernel cache: thousands of
candidates would fill it, and `release` deletes their files.

The work is spread over `n_parallel` helper processes (`build_worker`; started, not
forked, see `ember.autoschedule.worker`), which live as long as the builder, in
batches of up to `MAX_BATCH` candidates: a helper lowers and renders each, then
compiles them together, one translation unit and one compiler run for the batch
(`ember.backend.compile_unit`). A compiler run has a fixed cost (starting it, the
headers, the link: ~40 of GCC's ~240 ms for a conv candidate), and each kernel
compiles to the same code as alone. Each candidate still gets its own file (hard
links to the batch's library), so `release` of one leaves the others.

Candidates whose generated C is that of another are not compiled again. Different
step lists often render the same code (an unroll limit above every loop's size, a
compute location that lowers alike: 42% of a 2,000-trial ResNet-18 run's trials did;
the search now passes over most of them, `ember.autoschedule.program`). Each result
carries a digest of its source (`BuildResult.code_key`). Given `known_code` (the
tuner passes the digests of the task's measured candidates), a candidate whose digest
is in it or is an earlier candidate's of its batch comes back `duplicate`, uncompiled,
and the tuner reuses that code's measurement. Without it, every candidate is compiled.

A candidate whose lowering raises is an INSTANTIATION result with the error; a
compiler failure a COMPILE result with the compiler's first error lines (a batch the
compiler rejects is compiled again one candidate at a time, so the error is the
failing candidate's); one that takes more than `timeout` seconds a TIMEOUT result (its
helper, and the compiler it ran, are killed and a fresh helper takes its place; a
batch may take `timeout` per candidate, and one that runs over is built again one by
one). `build` never raises for a bad candidate.

`build_func` is the tutorials' choice of compiler: "default" (the target's, see
`ember.toolchain`) or "ndk" (the Android NDK's clang named by `$EMBER_NDK_CC`, what
the tuning tutorials' `use_ndk = True` selects). In Ember the target's triple picks
the compiler, so "ndk" needs an Android triple (`-mtriple=aarch64-linux-android`)
and says so for any other, rather than building with another compiler than asked;
a missing NDK compiler is an error when the builder is made, not a COMPILE result
for every candidate.
"""

from __future__ import annotations

import hashlib
import os
import re
import shutil
import tempfile
import time
import uuid
import weakref
from collections import deque
from collections.abc import Collection, Sequence
from dataclasses import dataclass, replace
from pathlib import Path

from ember.autoschedule.measure import ArgSpec, BuildResult, MeasureInput, release
from ember.autoschedule.records import ErrorKind
from ember.autoschedule.worker import (
    START_TIMEOUT,
    Worker,
    WorkerCrashed,
    WorkerTimedOut,
    wait_for_any,
)
from ember.backend import Output, backend_for, compile_unit, generate_kernel
from ember.backend.base import GeneratedKernel
from ember.device import host_cpu_count
from ember.errors import CompileError, EmberError, TargetError, ToolchainError
from ember.schedule.lower import lower
from ember.toolchain import ndk_compiler

WORKER_MODULE = "ember.autoschedule.build_worker"
# The kernels' C names: `candidate_<i>` for the i-th of a batch; the packed entry is
# `candidate_<i>_packed`.
KERNEL_NAME = "candidate"
# Candidates compiled together in one translation unit, at most: see the module
# docstring. Four took 11% off GCC's time per candidate and 30% off clang's (whose
# start is dearer); eight saved GCC no more and balance the helpers' work worse
# (BENCHMARKS.md, issue 19, fifth session).
MAX_BATCH = 4
_ERROR_LINES = 12


@dataclass(frozen=True, slots=True)
class BuildRequest:
    """Build `measure_inputs` into `<directory>/<name>-<i>.so`, one file each, except
    duplicates when `known_code` is given (to a helper)."""

    measure_inputs: tuple[MeasureInput, ...]
    directory: str
    name: str
    known_code: frozenset[str] | None = None


def code_key(source: str) -> str:
    """A digest of a candidate's generated source: equal for identical code."""
    return hashlib.blake2b(source.encode(), digest_size=16).hexdigest()


def build_candidates(request: BuildRequest) -> list[BuildResult]:
    """Lower and render each candidate (`ember.backend.generate_kernel`), then compile
    them all in one compiler run (`ember.backend.compile_unit`); where that fails, or
    the backend cannot, each alone, so that a compiler's error is its candidate's.
    With `known_code`, code in it or rendered for an earlier candidate of the batch is
    not compiled: a `duplicate` result. Errors become results. Runs in a helper process;
    time_cost is filled in by the builder, which sees the whole time."""
    directory = Path(request.directory)
    inputs = request.measure_inputs
    results: list[BuildResult | None] = [None] * len(inputs)
    generated: dict[int, GeneratedKernel] = {}
    seen = None if request.known_code is None else set(request.known_code)
    keys: dict[int, str] = {}
    for index, measure_input in enumerate(inputs):
        try:
            func = lower(measure_input.state, f"{KERNEL_NAME}_{index}")
            kernel = generate_kernel(func, measure_input.task.target)
            # Keyed without the kernel's name, which is its place in the batch.
            key = code_key(re.sub(rf"\b{KERNEL_NAME}_{index}(?![0-9])", "", kernel.source))
            keys[index] = key
            if seen is not None:
                if key in seen:
                    results[index] = BuildResult(None, "", (), code_key=key, duplicate=True)
                    continue
                seen.add(key)
            generated[index] = kernel
        except (ToolchainError, TargetError) as error:
            # A backend these helpers do not know: not the candidate's fault, but it
            # does not compile.
            results[index] = BuildResult(None, "", (), ErrorKind.COMPILE, str(error))
        except Exception as error:  # any other failure is the candidate's lowering
            message = f"{type(error).__name__}: {error}"
            results[index] = BuildResult(None, "", (), ErrorKind.INSTANTIATION, message)
    libraries = {index: directory / f"{request.name}-{index}.so" for index in generated}
    if _compiled_together(inputs, generated, directory / f"{request.name}.so", libraries):
        for index, kernel in generated.items():
            results[index] = _built(inputs[index], kernel, libraries[index])
    else:
        for index, kernel in generated.items():
            results[index] = _compile_alone(inputs[index], kernel, libraries[index])
    return [
        replace(result, code_key=keys.get(index, ""))
        for index, result in enumerate(results)
        if result is not None
    ]


def _compiled_together(
    inputs: Sequence[MeasureInput],
    generated: dict[int, GeneratedKernel],
    unit: Path,
    libraries: dict[int, Path],
) -> bool:
    """Compile the generated kernels into `unit` and give each its own name for it
    (`libraries`: hard links, so that releasing one candidate leaves the others);
    False where they were not compiled together."""
    targets = {str(inputs[index].task.target) for index in generated}
    if len(generated) < 2 or len(targets) != 1:
        return False
    target = inputs[next(iter(generated))].task.target
    try:
        if compile_unit(list(generated.values()), target, unit) is None:
            return False
    except (CompileError, ToolchainError, OSError):
        return False  # each alone says whose error it was
    try:
        for library in libraries.values():
            _link_or_copy(unit, library)
    finally:
        unit.unlink(missing_ok=True)
    return True


def _link_or_copy(source: Path, name: Path) -> None:
    try:
        os.link(source, name)
    except OSError:  # a file system without hard links
        shutil.copyfile(source, name)


def _compile_alone(
    measure_input: MeasureInput, kernel: GeneratedKernel, library: Path
) -> BuildResult:
    target = measure_input.task.target
    try:
        backend_for(target).compile(kernel.source, target, Output.SHARED, path=library)
    except CompileError as error:
        status = f"{error.argv[0]} exited with status {error.returncode}"
        message = f"{status}:\n{_first_errors(error.stderr)}"
        return BuildResult(None, "", (), ErrorKind.COMPILE, message)
    except (ToolchainError, TargetError, OSError) as error:
        # No compiler, a full disk: not the candidate's fault, but it did not compile.
        return BuildResult(None, "", (), ErrorKind.COMPILE, str(error))
    return _built(measure_input, kernel, library)


def _built(measure_input: MeasureInput, kernel: GeneratedKernel, library: Path) -> BuildResult:
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

    def build(
        self, inputs: Sequence[MeasureInput], known_code: Collection[str] | None = None
    ) -> list[BuildResult]:
        """One result per candidate, in order; never raises for a bad candidate. With
        `known_code`, code in it or repeated within a batch is not compiled (a
        `duplicate` result; see the module docstring)."""
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
        known = None if known_code is None else frozenset(known_code)
        queue = deque(_batches(len(inputs), self.n_parallel))
        running: dict[Worker, tuple[list[int], float]] = {}
        self._pool.grow(min(self.n_parallel, len(queue)))
        try:
            while queue or running:
                for worker in self._pool.idle(running):
                    if not queue:
                        break
                    batch = queue.popleft()
                    batch_inputs = tuple(inputs[index] for index in batch)
                    name = uuid.uuid4().hex
                    worker.send(BuildRequest(batch_inputs, str(self.directory), name, known))
                    running[worker] = (batch, time.monotonic())
                for worker, batch, built in self._collect(running):
                    del running[worker]
                    if built is None:  # a batch that failed as a whole: each alone
                        queue.extend([index] for index in batch)
                        continue
                    for index, result in zip(batch, built, strict=True):
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
        self, running: dict[Worker, tuple[list[int], float]]
    ) -> list[tuple[Worker, list[int], list[BuildResult] | None]]:
        """Wait for a reply, a helper starting, or the first deadline; the finished."""
        now = time.monotonic()
        deadlines = [start + self._limit(batch) for batch, start in running.values()]
        deadline = min(deadlines, default=None)
        wait_for = START_TIMEOUT if deadline is None else max(0.0, deadline - now)
        ready = wait_for_any([worker.connection for worker in self._pool.workers], wait_for)
        for worker in self._pool.starting():
            if worker.connection in ready:
                worker.wait_ready(0)
        if deadline is None and not ready:
            raise EmberError(f"no build helper started within {START_TIMEOUT:g} s")
        finished = []
        for worker, (batch, start) in list(running.items()):
            late = time.monotonic() - start > self._limit(batch)
            if worker.connection in ready or late:
                finished.append((worker, batch, self._finish(worker, batch, start)))
        return finished

    def _limit(self, batch: list[int]) -> float:
        """A batch may take `timeout` seconds per candidate."""
        return self.timeout * len(batch)

    def _finish(self, worker: Worker, batch: list[int], start: float) -> list[BuildResult] | None:
        """The results of `worker`'s batch, or None for a batch of several that timed
        out or killed its helper (each is then built alone, so that only the
        candidate at fault fails); replaces the helper if it died or hung."""
        try:
            built = worker.receive(0)
        except (WorkerTimedOut, WorkerCrashed) as error:
            self._pool.replace(worker)
            if len(batch) > 1:
                return None
            if isinstance(error, WorkerCrashed):
                reason = f"the build process died ({error.reason}) building it"
                seconds = time.monotonic() - start
                return [BuildResult(None, "", (), ErrorKind.COMPILE, reason, seconds)]
            return [self._timeout(start)]
        assert isinstance(built, list)
        elapsed = time.monotonic() - start
        if elapsed > self._limit(batch):
            release(built)
            return None if len(batch) > 1 else [self._timeout(start)]
        # The candidates of a batch share its time.
        return [replace(result, time_cost=elapsed / len(batch)) for result in built]

    def _timeout(self, start: float) -> BuildResult:
        message = (
            f"building took longer than the builder's timeout of {self.timeout:g} s "
            "(lowering and compiling)"
        )
        return BuildResult(None, "", (), ErrorKind.TIMEOUT, message, time.monotonic() - start)


def _batches(count: int, n_parallel: int) -> list[list[int]]:
    """Candidate indices in batches of up to `MAX_BATCH`, small enough that each
    helper gets two batches or more (the last ones to finish then wait less)."""
    size = max(1, min(MAX_BATCH, count // (2 * n_parallel)))
    return [list(range(first, min(first + size, count))) for first in range(0, count, size)]


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

    def idle(self, running: dict[Worker, tuple[list[int], float]]) -> list[Worker]:
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
