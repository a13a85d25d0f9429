"""Coverage-guided fuzzing of Ember's importer with Google's atheris (libFuzzer for Python).

    pip install -e '.[fuzz]'
    python -m ember.testing.fuzz.coverage --minutes 30 --seed 1 --out /tmp/cov1
    python -m ember.testing.fuzz.coverage --minutes 30 --keep-going --corpus /tmp/corpus

Where `python -m ember.testing.fuzz` mutates seed models blindly and checks each case
end to end in a helper process (a few cases a second), this runs thousands of inputs a
second in one process and keeps those that reach new branches of Ember's and ONNX's
Python code, so it digs deep into the importer's rarely taken paths. It checks one half
of the contract: for any model bytes, `from_onnx` (symbolic input dimensions fixed to 2),
`verify` and, for graphs whose tensors are small (check.py's rule), the interpreter on
random inputs either succeed or raise an `EmberError`. It does not build: compiling C
costs seconds a model, a thousand times the import, and would starve the coverage
feedback; nor does it compare with ONNX Runtime. Replay a finding with the end-to-end
checks: `python -m ember.testing.fuzz --replay FILE --no-build`.

The corpus (--corpus, a temporary directory by default) starts with the serialized seed
models and grows with every input libFuzzer finds interesting. Half of the mutations
parse the input as a ModelProto and apply one of the structure-aware MUTATIONS of
mutations.py (a byte-level mutator rarely keeps a protobuf valid); the rest are
libFuzzer's own byte mutations.

libFuzzer stops at the first failing input: an exception other than `EmberError`
("crash-"), an input running past 20 s ("timeout-") or past 8 GiB ("oom-"); it writes
the input into --out, and the summary names the exception, its innermost `ember/` frame
and the command that replays it. With --keep-going an exception does not stop the run:
the first input of each distinct one (exception type, innermost `ember/` frame) is
written to --out (`bug-Type-HASH.onnx`, its traceback in `bug-Type-HASH.txt`), and after a
timeout, an out-of-memory or a crash libFuzzer starts again on the corpus so far, so that
a long run gets past shallow bugs not fixed yet. The process's address space is capped
(ADDRESS_SPACE_LIMIT_BYTES), so that a huge allocation is a MemoryError, which Ember must
refuse with its ResourceError, rather than memory the machine gives and then runs out of.
Fuzzing runs in a child process, because libFuzzer ends its process when it stops.
"""

from __future__ import annotations

import argparse
import functools
import hashlib
import importlib.util
import json
import logging
import random
import re
import subprocess
import sys
import tempfile
import time
import traceback
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path

import onnx

from ember.errors import EmberError
from ember.frontend import from_onnx
from ember.graph import interpret, verify
from ember.testing.fuzz.check import MAX_RUN_BYTES, _run_bytes, fixed_shapes, random_feeds
from ember.testing.fuzz.mutations import MUTATIONS
from ember.testing.fuzz.runner import innermost_ember_frame, quiet
from ember.testing.fuzz.seeds import SEED_GRAPHS, seed_model

TIMEOUT_SECONDS = 20
# The fuzzing process's address space is capped, so that an input asking NumPy for tens
# of GiB gets a MemoryError, which Ember must turn into its ResourceError, instead of
# being granted by overcommit. libFuzzer's RSS limit, above the cap, stays as a backstop:
# it reads the process's peak RSS, so when it fires it blames whichever input runs then,
# not the one that grew the process (and a run past it ends, --keep-going or not).
ADDRESS_SPACE_LIMIT_BYTES = 6 << 30
RSS_LIMIT_MB = 8192
STRUCTURE_MUTATION_SHARE = 0.5
INSTALL_HINT = "atheris is not installed: pip install -e '.[fuzz]' (or pip install atheris)"
# libFuzzer leaves flags that start with "--" to the target: this one is ours.
KEEP_GOING_FLAG = "--ember-keep-going="
# How the child tells the parent about a --keep-going finding: this prefix, then JSON.
FINDING_PREFIX = "EMBER-FINDING "

# The fuzzing process. Ember and ONNX import under atheris's instrumentation, so that
# their branches guide the fuzzer; it must come first (a module imported before it is
# not instrumented), hence a program of its own rather than `-m` on this module (which
# imports ember.testing.fuzz, and with it Ember, before any code of ours runs). The
# fuzzer's own modules are left out: their branches say nothing about Ember.
CHILD_PROGRAM = f"""
import resource
import sys
import atheris
resource.setrlimit(resource.RLIMIT_AS, ({ADDRESS_SPACE_LIMIT_BYTES}, {ADDRESS_SPACE_LIMIT_BYTES}))
with atheris.instrument_imports(include=["ember", "onnx"], exclude=[
        "ember.testing.fuzz", "ember.testing.fuzz.campaign", "ember.testing.fuzz.coverage",
        "ember.testing.fuzz.mutations", "ember.testing.fuzz.runner",
        "ember.testing.fuzz.seeds", "ember.testing.oracle"]):
    from ember.testing.fuzz import coverage
    coverage.warm_up()
coverage.run_libfuzzer(sys.argv)
"""


def check_model(data: bytes) -> None:
    """The fuzz target: import, verify and (small graphs) interpret `data`. Returns when
    Ember accepts the model or refuses it with an `EmberError`; anything else it raises
    propagates, which libFuzzer reports as a crash."""
    try:
        graph, params = from_onnx(data, shapes=fixed_shapes(data))
        verify(graph, params)
        if _run_bytes(graph) <= MAX_RUN_BYTES:
            interpret(graph, params, random_feeds(graph, 0))
    except EmberError:
        return


def mutate_model(
    data: bytes, max_size: int, seed: int, mutate_bytes: Callable[[bytes, int], bytes]
) -> bytes:
    """libFuzzer's custom mutator: with probability STRUCTURE_MUTATION_SHARE, one of
    MUTATIONS applied to `data` parsed as a ModelProto; otherwise, or when `data` does
    not parse, the mutation does not apply or the result exceeds `max_size`,
    `mutate_bytes(data, max_size)` (atheris.Mutate: libFuzzer's byte mutations)."""
    rng = random.Random(seed)
    if rng.random() < STRUCTURE_MUTATION_SHARE:
        try:
            model = onnx.ModelProto.FromString(data)
            if rng.choice(MUTATIONS)(model, rng) is not None:
                mutated = model.SerializeToString()
                if len(mutated) <= max_size:
                    return mutated
        # A mutation may raise on a model an earlier byte mutation made odd, and protobuf
        # refuses some values it sets: both fall back on a byte mutation.
        except Exception:
            pass
    return mutate_bytes(data, max_size)


def seed_corpus() -> dict[str, bytes]:
    """File name -> serialized seed model, for each of SEED_GRAPHS."""
    return {f"seed-{name}.onnx": seed_model(name).SerializeToString() for name in SEED_GRAPHS}


def warm_up() -> None:
    """Run the target once on each seed: the modules Ember imports on first use load
    now, while atheris instruments imports."""
    quiet()
    for data in seed_corpus().values():
        check_model(data)


@dataclass(frozen=True, slots=True)
class Finding:
    """A failing input: what failed ("crash", "timeout", "oom"...; "bug" for one kept
    going past), the exception's first line and innermost `ember/` frame when it was
    one, and where the input is."""

    kind: str
    exception: str
    frame: str
    path: Path

    def key(self) -> tuple[str, str]:
        """What tells two findings apart: the exception's type and the innermost frame."""
        return self.exception.split(":")[0], self.frame

    def describe(self) -> str:
        where = f" at {self.frame}" if self.frame else ""
        return (
            f"{self.kind}: {self.exception}{where}\n  input: {self.path}\n"
            f"  replay: python -m ember.testing.fuzz --replay {self.path} --no-build"
        )


def keep_going_target(target: Callable[[bytes], None], out: Path) -> Callable[[bytes], None]:
    """`target`, returning where it raises; the first input of each distinct exception
    (type, innermost `ember/` frame) is written to `out` and announced on stderr."""
    seen: set[tuple[str, str]] = set()

    def tolerant_target(data: bytes) -> None:
        try:
            target(data)
        except Exception as error:
            frames = traceback.extract_tb(error.__traceback__)
            frame = innermost_ember_frame((f.filename, f.lineno or 0) for f in frames)
            if (type(error).__name__, frame) in seen:
                return
            seen.add((type(error).__name__, frame))
            # Named by content, as libFuzzer names its artifacts: runs may share `out`.
            stem = f"bug-{type(error).__name__}-{hashlib.sha1(data).hexdigest()[:16]}"
            (out / f"{stem}.onnx").write_bytes(data)
            (out / f"{stem}.txt").write_text("".join(traceback.format_exception(error)))
            lines = str(error).strip().splitlines()
            exception = f"{type(error).__name__}: {lines[0] if lines else ''}"
            finding = Finding("bug", exception[:300], frame, out / f"{stem}.onnx")
            record = {"exception": finding.exception, "frame": frame, "path": str(finding.path)}
            print(FINDING_PREFIX + json.dumps(record), file=sys.stderr, flush=True)

    return tolerant_target


def run_libfuzzer(argv: list[str]) -> None:
    """The child's main: fuzz `check_model` with libFuzzer's command line `argv` (and
    KEEP_GOING_FLAG). Never returns: libFuzzer exits the process when it stops."""
    import atheris

    quiet()
    # ONNX and ONNX Runtime warn through `warnings` (silenced by quiet()); this is for
    # anything that logs, which would flood libFuzzer's output at thousands of runs a second.
    logging.disable(logging.CRITICAL)
    target: Callable[[bytes], None] = check_model
    for argument in argv:
        if argument.startswith(KEEP_GOING_FLAG):
            target = keep_going_target(check_model, Path(argument.removeprefix(KEEP_GOING_FLAG)))
    atheris.Setup(
        argv,
        target,
        custom_mutator=lambda data, max_size, seed: mutate_model(
            data, max_size, seed, atheris.Mutate
        ),
    )
    atheris.Fuzz()


@dataclass(slots=True)
class CoverageResult:
    """What a libFuzzer run reported: its statistics and the failing inputs."""

    executions: int = 0
    execs_per_second: int = 0
    new_units: int = 0
    seconds: float = 0.0  # wall time, with instrumenting and loading Ember
    exit_status: int = 0
    findings: list[Finding] = field(default_factory=list)

    def add(self, run: CoverageResult) -> None:
        """Count a restarted run's statistics and findings in with this one's; a "bug"
        already found (same exception and frame) by an earlier run is not counted again."""
        fuzzing = self.fuzzing_seconds() + run.fuzzing_seconds()
        self.executions += run.executions
        self.execs_per_second = round(self.executions / fuzzing) if fuzzing else 0
        self.new_units += run.new_units
        self.seconds += run.seconds
        self.exit_status = run.exit_status
        known = {(f.exception.split(":")[0], f.frame) for f in self.findings if f.kind == "bug"}
        for finding in run.findings:
            if (
                finding.kind != "bug"
                or (finding.exception.split(":")[0], finding.frame) not in known
            ):
                self.findings.append(finding)

    def fuzzing_seconds(self) -> float:
        """libFuzzer's own time (without instrumenting and loading Ember)."""
        return self.executions / self.execs_per_second if self.execs_per_second else 0.0


def libfuzzer_arguments(minutes: float, seed: int, corpus: Path, out: Path) -> list[str]:
    return [
        f"-max_total_time={max(1, round(minutes * 60))}",
        f"-seed={seed}",
        f"-timeout={TIMEOUT_SECONDS}",
        f"-rss_limit_mb={RSS_LIMIT_MB}",
        f"-artifact_prefix={out}/",
        "-print_final_stats=1",
        str(corpus),
    ]


def fuzz_with_coverage(
    minutes: float,
    seed: int,
    corpus: Path,
    out: Path,
    echo: Callable[[str], None],
    keep_going: bool = False,
) -> CoverageResult:
    """Write the seeds into `corpus`, run libFuzzer in a child process for `minutes` and
    read its report; each line of its output but the instrumentation's goes to `echo`.

    With `keep_going`, an input that stops libFuzzer (a timeout, running out of memory, a
    crash of the interpreter) does not end the run: libFuzzer starts again on the corpus
    grown so far (the stopping input is not in it) for the time left, with the next seed."""
    if importlib.util.find_spec("atheris") is None:
        raise EmberError(INSTALL_HINT)
    corpus.mkdir(parents=True, exist_ok=True)
    out.mkdir(parents=True, exist_ok=True)
    for name, data in seed_corpus().items():
        (corpus / name).write_bytes(data)
    deadline = time.monotonic() + minutes * 60
    total = CoverageResult()
    while True:
        left = deadline - time.monotonic()
        result, interrupted = _fuzz_once(left / 60, seed, corpus, out, echo, keep_going)
        total.add(result)
        if interrupted or not keep_going or result.exit_status == 0:
            break
        if deadline - time.monotonic() < MIN_RESTART_SECONDS:
            break
        seed = seed + 1 if seed else 0
        echo(f"libFuzzer stopped (status {result.exit_status}); restarting on the corpus")
    return total


# A restart costs a few seconds (instrumenting Ember, loading the corpus): not worth it
# for less fuzzing time than this.
MIN_RESTART_SECONDS = 20


def _fuzz_once(
    minutes: float,
    seed: int,
    corpus: Path,
    out: Path,
    echo: Callable[[str], None],
    keep_going: bool,
) -> tuple[CoverageResult, bool]:
    """One libFuzzer child: its result, and whether Ctrl-C ended it."""
    command = [sys.executable, "-c", CHILD_PROGRAM]
    command += libfuzzer_arguments(minutes, seed, corpus, out)
    command += [f"{KEEP_GOING_FLAG}{out}"] if keep_going else []
    start = time.monotonic()
    child = subprocess.Popen(
        command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, errors="replace"
    )
    assert child.stdout is not None
    report = LibFuzzerReport()
    interrupted = False
    try:
        for line in child.stdout:
            line = line.rstrip("\n")
            report.read(line)
            if line.startswith(FINDING_PREFIX):
                echo(report.result.findings[-1].describe())
            elif not line.startswith("INFO: Instrumenting "):
                echo(line)
    except KeyboardInterrupt:  # the child got it too: libFuzzer prints its stats and ends
        interrupted = True
        for line in child.stdout:
            report.read(line.rstrip("\n"))
    result = report.finish()
    result.exit_status = child.wait()
    result.seconds = time.monotonic() - start
    return result, interrupted


class LibFuzzerReport:
    """Reads libFuzzer's output line by line into a CoverageResult."""

    def __init__(self) -> None:
        self.result = CoverageResult()
        self.failure = ""  # libFuzzer's ERROR line: "deadly signal", "timeout after 21 seconds"
        self.traceback: list[str] = []  # the uncaught Python exception's, when there is one
        self.in_traceback = False
        self.artifacts: list[Path] = []

    def read(self, line: str) -> None:
        if line.strip() == "=== Uncaught Python exception: ===":
            self.traceback, self.in_traceback = [], True
            return
        if self.in_traceback:
            # A chained exception's traceback has blank lines; libFuzzer's report follows.
            if not re.match(r"==\d+== ", line):
                self.traceback.append(line)
                return
            self.in_traceback = False
        if line.startswith(FINDING_PREFIX):
            record = json.loads(line.removeprefix(FINDING_PREFIX))
            finding = Finding("bug", record["exception"], record["frame"], Path(record["path"]))
            self.result.findings.append(finding)
        statistic = re.match(r"stat::(\w+):\s+(\d+)", line)
        if statistic is not None:
            name, value = statistic.group(1), int(statistic.group(2))
            if name == "number_of_executed_units":
                self.result.executions = value
            elif name == "average_exec_per_sec":
                self.result.execs_per_second = value
            elif name == "new_units_added":
                self.result.new_units = value
        failure = re.match(r"==\d+== ERROR: libFuzzer: (.*)", line)
        if failure is not None:
            self.failure = failure.group(1)
        written = re.search(r"Test unit written to (\S+)", line)
        if written is not None:
            self.artifacts.append(Path(written.group(1)))

    def finish(self) -> CoverageResult:
        """The result, with the inputs libFuzzer wrote when it stopped (after the last line:
        it may say why it stopped after saying where the input is)."""
        self.result.findings += [self.artifact(path) for path in self.artifacts]
        self.artifacts = []
        return self.result

    def artifact(self, path: Path) -> Finding:
        """The input libFuzzer wrote when it stopped, and why it stopped."""
        kind = path.name.split("-")[0]
        if kind != "crash" or not self.traceback:
            return Finding(kind, self.failure, "", path)
        # The exception's first line follows the last frame's `  File` line and its source
        # lines (indented by 4); the message's next lines may be indented too.
        files = [i for i, text in enumerate(self.traceback) if text.startswith('  File "')]
        rest = self.traceback[files[-1] + 1 if files else 0 :]
        while rest and rest[0].startswith("    "):
            rest = rest[1:]
        frames = re.findall(r'File "([^"]+)", line (\d+)', "\n".join(self.traceback))
        frame = innermost_ember_frame((name, int(number)) for name, number in frames)
        return Finding(kind, rest[0] if rest else self.failure, frame, path)


def summary(result: CoverageResult) -> str:
    # libFuzzer's own rate: the wall time also counts instrumenting and loading Ember.
    rate = result.execs_per_second
    fuzzing = f"~{result.fuzzing_seconds():.0f} s" if rate else "under a second"
    lines = [
        f"{result.executions} executions ({rate}/s) in {fuzzing} of fuzzing"
        f" ({result.seconds:.0f} s with start-up), {result.new_units} new corpus inputs"
    ]
    lines += [finding.describe() for finding in result.findings]
    if not result.findings:
        if result.exit_status == 0:
            lines.append("no failing input")
        else:
            lines.append(f"libFuzzer exited with status {result.exit_status}; see above")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember.testing.fuzz.coverage",
        description="Coverage-guided fuzzing of Ember's importer with atheris "
        "(see the module docstring).",
    )
    parser.add_argument("--minutes", type=float, default=5.0, help="fuzzing time (5)")
    parser.add_argument(
        "--seed", type=int, default=0, help="libFuzzer's seed (0: libFuzzer picks one)"
    )
    parser.add_argument(
        "--corpus", type=Path, help="corpus directory, kept and reused (default: a temporary one)"
    )
    parser.add_argument(
        "--out",
        type=Path,
        help="where failing inputs are written (default: a new directory in the temporary "
        "directory, removed when empty)",
    )
    parser.add_argument(
        "--keep-going",
        action="store_true",
        help="write the first input of each distinct exception and go on fuzzing",
    )
    args = parser.parse_args(argv)
    out = args.out or Path(tempfile.mkdtemp(prefix="ember-coverage-"))
    try:
        with tempfile.TemporaryDirectory(prefix="ember-corpus-") as scratch:
            corpus = args.corpus or Path(scratch)
            echo = functools.partial(print, file=sys.stderr)
            result = fuzz_with_coverage(
                args.minutes, args.seed, corpus, out, echo, keep_going=args.keep_going
            )
    except EmberError as error:
        print(f"error: {error}", file=sys.stderr)
        return 2
    finally:
        if args.out is None and out.exists() and not any(out.iterdir()):
            out.rmdir()
    print(summary(result))
    if result.findings:
        return 1
    return result.exit_status


if __name__ == "__main__":
    sys.exit(main())
