"""Ember against ONNX Runtime on whole networks: the same ONNX file, the same input, the
same thread count, one process, timed alternately; % of this machine's FMA peak; peak
resident memory of each.

    python benchmarks/compare.py [MODEL ...] [--threads 2] [--repeat 20] [--block 5]
        [--settle-ms 100] [--batch-size 1] [--input-shapes S] [--target llvm]
        [--no-cold-compile] [--no-memory] [--contended] [--tuning-records LOG]

MODEL is an .onnx file or a built-in workload name; by default the issue's six:
resnet-18, resnet-50, mobilenet_v2, mobilenet_v3_small, squeezenet_v1.1, inception_v3.
A built-in workload is exported to ONNX (NCHW, seeded random weights) with
ember.testing.to_onnx; from there both run the same file, as a user would:

- compile time: `ember compile MODEL.onnx` in a fresh process, first with
  EMBER_CACHE_DIR at an empty directory (cold: every kernel generated and compiled),
  then again with it (warm: kernels from the cache);
- run time: the artifact loaded with `ember.runtime.load` and an ONNX Runtime session
  (all graph optimisations, CPU provider, intra-op threads = --threads), timed from
  Python in alternating blocks: `--repeat` rounds of `--block` runs of each, every
  block after `--settle-ms` of untimed runs. (Alternating run by run measures the two
  thread pools fighting: ORT's workers spin for ~50 ms after each run and slow
  Ember's OpenMP kernels 2-3x meanwhile, as Ember's spinning slows ORT's next run.)
  The medians, their ratio, and the GFLOP/s of each as a share of the FMA peak that
  benchmarks/peak.py measures for --threads threads (FLOPs: the artifact's
  `mod.json`, 2 per multiply-accumulate);
- memory: in two fresh processes, one per runtime, the growth of peak resident memory
  (VmHWM, reset after the imports) from loading the model through 10 runs. Ember's is
  split into params and arena (from mod.json) and the rest (code, runtime, buffers,
  thread stacks, page rounding).

`--contended` times each model a second time with a busy process pinned to one core
(another program's load; the issue's "under load") and prints both runtimes' times,
their ratio and each one's slowdown against its quiet time.

The largest difference between the two outputs is printed as a sanity check.
"""

from __future__ import annotations

import argparse
import contextlib
import itertools
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

MODELS = (
    "resnet-18",
    "resnet-50",
    "mobilenet_v2",
    "mobilenet_v3_small",
    "squeezenet_v1.1",
    "inception_v3",
)
MiB = 1 << 20


@dataclass
class Result:
    model: str
    ember_ms: float
    ort_ms: float
    flops: int
    cold_s: float | None
    warm_s: float
    max_diff: float
    # --contended: the same timing with a busy process on one core.
    busy: tuple[float, float] | None = None


@dataclass
class Memory:
    model: str
    ember_bytes: int
    ort_bytes: int
    params_bytes: int
    arena_bytes: int


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="*", default=list(MODELS), help=".onnx or workload")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="alternating rounds")
    parser.add_argument("--block", type=int, default=5, help="timed runs per round and runtime")
    parser.add_argument(
        "--settle-ms", type=float, default=100, help="untimed runs before each block (ms)"
    )
    parser.add_argument("--batch-size", type=int, default=1, help="for built-in workloads")
    parser.add_argument("--target", default="llvm")
    parser.add_argument(
        "--input-shapes", help="for .onnx files with symbolic dimensions, as `ember compile`"
    )
    parser.add_argument(
        "--no-cold-compile", action="store_true", help="compile once, with the usual cache"
    )
    parser.add_argument("--no-memory", action="store_true", help="skip the memory processes")
    parser.add_argument(
        "--contended",
        action="store_true",
        help="time again with a busy process on one core (another program's load)",
    )
    parser.add_argument(
        "--tuning-records",
        help="compile with this log (`ember tune -o`); tasks without a record use defaults",
    )
    # Internal: one memory measurement in this process (see measure_memory).
    parser.add_argument(
        "--memory-probe", nargs=2, metavar=("RUNTIME", "PATH"), help=argparse.SUPPRESS
    )
    return parser.parse_args()


def add_alternation_arguments(parser: argparse.ArgumentParser) -> None:
    """The options of a script that compiles a model and times it alternately with
    ONNX Runtime (`time_alternately`): threads, rounds, blocks, settling, batch size,
    target and input shapes."""
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=20, help="alternating rounds")
    parser.add_argument("--block", type=int, default=5, help="timed runs per round and runtime")
    parser.add_argument("--settle-ms", type=float, default=100)
    parser.add_argument("--batch-size", type=int, default=1, help="for built-in workloads")
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--input-shapes")


def _onnx_file(model: str, args: argparse.Namespace, work: Path) -> Path:
    """`model` as an ONNX file: itself, or the built-in workload exported in NCHW."""
    from ember.testing import get_workload, list_workloads, to_onnx

    if model not in list_workloads():
        return Path(model)
    graph, params = get_workload(model, batch_size=args.batch_size, layout="NCHW")
    path = work / f"{model}.onnx"
    to_onnx(graph, params, path)
    return path


def _compile(
    onnx_path: Path, artifact: Path, args: argparse.Namespace, cache: Path | None
) -> float:
    """Wall time of `ember compile` in a fresh process (kernel cache `cache`, or the
    usual one)."""
    env = dict(os.environ)
    if cache is not None:
        env["EMBER_CACHE_DIR"] = str(cache)
    command = [sys.executable, "-m", "ember.cli", "compile", str(onnx_path)]
    command += ["--target", args.target, "-o", str(artifact)]
    if args.input_shapes:
        command += ["--input-shapes", args.input_shapes]
    if args.tuning_records:
        command += ["--tuning-records", args.tuning_records]
    start = time.perf_counter()
    done = subprocess.run(command, env=env, capture_output=True, text=True)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"ember compile failed:\n{done.stdout}{done.stderr}")
    return elapsed


def _ort_session(onnx_path: Path, threads: int):  # type: ignore[no-untyped-def]
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    return onnxruntime.InferenceSession(
        str(onnx_path), sess_options=options, providers=["CPUExecutionProvider"]
    )


def _inputs(specs) -> dict[str, np.ndarray]:  # type: ignore[no-untyped-def]
    """One seeded array per input of the Ember module (the ONNX file's inputs)."""
    rng = np.random.default_rng(0)
    arrays = {}
    for spec in specs:
        dtype = np.dtype(spec.dtype)
        if dtype.kind == "f":
            arrays[spec.name] = rng.uniform(0, 1, size=spec.shape).astype(dtype)
        else:  # token ids and masks: 0/1 is valid for both
            arrays[spec.name] = rng.integers(0, 2, size=spec.shape).astype(dtype)
    return arrays


def fed_beside_ort(modules, onnx_path: Path, threads: int):  # type: ignore[no-untyped-def]
    """An ONNX Runtime session of `onnx_path` and one seeded feed, set as every
    module's inputs: the same input for every runtime of an alternation."""
    session = _ort_session(onnx_path, threads)
    feed = _inputs(modules[0].inputs)
    for module in modules:
        for name, array in feed.items():
            module.set_input(name, array)
    return session, feed


def _settle(run: Callable[[], object], settle_ms: float) -> None:
    """Run untimed for `settle_ms` (at least twice): the other runtime's threads stop
    spinning (ORT's keep spinning ~50 ms after a run and slow OpenMP kernels 2-3x
    meanwhile) and this one's are awake."""
    deadline = time.perf_counter() + settle_ms * 1e-3
    run()
    run()
    while time.perf_counter() < deadline:
        run()


def time_alternately(
    runners: Sequence[Callable[[], object]], args: argparse.Namespace
) -> list[float]:
    """Median ms of each runner: `--repeat` rounds, each a block of `--block` timed runs
    of every runner in turn, each block after settling. The order of the turns goes
    through every permutation, round by round: a runtime that always ran right after
    ONNX Runtime read 3-28% slower than in another place (EfficientNet-B0, BENCHMARKS.md
    issue 19 fifth session), so no runner keeps one place."""
    samples: list[list[float]] = [[] for _ in runners]
    orders = itertools.cycle(itertools.permutations(range(len(runners))))
    for _ in range(args.repeat):
        for index in next(orders):
            run, times = runners[index], samples[index]
            _settle(run, args.settle_ms)
            for _ in range(args.block):
                start = time.perf_counter()
                run()
                times.append(time.perf_counter() - start)
    return [1e3 * statistics.median(times) for times in samples]


def _time_alternately(module, session, feed, args: argparse.Namespace) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    """Median ms of Ember and ORT (time_alternately)."""
    ember, ort = time_alternately([module.run, lambda: session.run(None, feed)], args)
    return ember, ort


def compare(model: str, args: argparse.Namespace, work: Path) -> tuple[Result, Path, Path]:
    """The timing of one model; also its ONNX file and artifact, for measure_memory."""
    from ember.runtime import load, read_metadata

    onnx_path = _onnx_file(model, args, work)
    artifact = work / f"{Path(model).stem}.tar"
    cold = None
    if args.no_cold_compile:
        warm = _compile(onnx_path, artifact, args, None)
    else:
        cache = Path(tempfile.mkdtemp(dir=work, prefix="cache-"))
        cold = _compile(onnx_path, artifact, args, cache)
        warm = _compile(onnx_path, artifact, args, cache)
    module = load(artifact)
    session, feed = fed_beside_ort([module], onnx_path, args.threads)
    ember_ms, ort_ms = _time_alternately(module, session, feed, args)
    busy = None
    if args.contended:
        with _busy_core():
            busy = _time_alternately(module, session, feed, args)
    theirs = session.run(None, feed)
    diffs = [float(np.max(np.abs(module.get_output(i) - want))) for i, want in enumerate(theirs)]
    graph = read_metadata(artifact)["graph"]
    flops = int(graph["total_flops"]) if isinstance(graph, dict) else 0
    result = Result(model, ember_ms, ort_ms, flops, cold, warm, max(diffs), busy)
    return result, onnx_path, artifact


@contextlib.contextmanager
def _busy_core() -> Iterator[None]:
    """Another program keeping one core busy: a spinning process pinned to the last
    CPU (where the system allows pinning), stopped on exit."""
    spin = "import os\ntry:\n    os.sched_setaffinity(0, {os.cpu_count() - 1})\n"
    spin += "except (AttributeError, OSError):\n    pass\nwhile True:\n    pass\n"
    process = subprocess.Popen([sys.executable, "-c", spin])
    try:
        time.sleep(0.5)  # let it start spinning
        yield
    finally:
        process.kill()
        process.wait()


# -- memory ------------------------------------------------------------------------------


def _status_kib(field: str) -> int:
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith(field + ":"):
            return int(line.split()[1])
    raise RuntimeError(f"/proc/self/status has no {field}")


def memory_probe(runtime: str, path: str, threads: int) -> None:
    """In a fresh process: load `path` with `runtime` (ember or ort), run it 10 times,
    print the growth of peak resident memory in bytes (JSON)."""
    if runtime == "ember":
        from ember.runtime import load
    else:
        import onnxruntime  # noqa: F401
    # Reset VmHWM to the current RSS (Linux >= 4.0), so the imports do not count.
    with contextlib.suppress(OSError):
        Path("/proc/self/clear_refs").write_text("5")
    before = _status_kib("VmRSS")
    if runtime == "ember":
        module = load(path)
        for name, array in _inputs(module.inputs).items():
            module.set_input(name, array)
        for _ in range(10):
            module.run()
    else:
        session = _ort_session(Path(path), threads)
        feed = {i.name: np.zeros([d if isinstance(d, int) else 1 for d in i.shape], np.float32)
                for i in session.get_inputs()}  # fmt: skip
        for _ in range(10):
            session.run(None, feed)
    print(json.dumps({"growth": (_status_kib("VmHWM") - before) * 1024}))


def _probe(runtime: str, path: Path, threads: int) -> int:
    command = [sys.executable, __file__, "--memory-probe", runtime, str(path)]
    command += ["--threads", str(threads)]
    done = subprocess.run(command, capture_output=True, text=True)
    if done.returncode != 0:
        sys.exit(f"memory probe ({runtime}) failed:\n{done.stdout}{done.stderr}")
    return int(json.loads(done.stdout.splitlines()[-1])["growth"])


def measure_memory(model: str, onnx_path: Path, artifact: Path, threads: int) -> Memory:
    from ember.runtime import read_metadata

    metadata = read_metadata(artifact)
    params = sum(
        int(np.prod(p["shape"], dtype=np.int64)) * np.dtype(p["dtype"]).itemsize
        for p in metadata["params"]  # type: ignore[union-attr]
    )
    arena = int(metadata["memory_plan"]["arena_bytes"])  # type: ignore[index]
    ember = _probe("ember", artifact, threads)
    ort = _probe("ort", onnx_path, threads)
    return Memory(model, ember, ort, params, arena)


# -- main --------------------------------------------------------------------------------


def main() -> None:
    args = _parse()
    # OpenMP reads this when the first kernel library loads: set it before any load,
    # and the compile and memory subprocesses inherit it.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    if args.memory_probe:
        memory_probe(*args.memory_probe, args.threads)
        return
    from peak import measure_peak

    peak = measure_peak(args.threads, target=args.target)
    print(
        f"{args.threads} threads, batch {args.batch_size}, {args.repeat} alternating rounds of "
        f"{args.block} runs each after {args.settle_ms:g} ms settling, "
        f"target {args.target}; fp32 FMA peak {peak:.0f} GFLOP/s (benchmarks/peak.py)"
    )
    print(
        f"{'model':20s} {'ember ms':>9s} {'ORT ms':>9s} {'ember/ORT':>9s} {'GFLOP':>6s} "
        f"{'ember %pk':>9s} {'ORT %pk':>8s} {'cold s':>7s} {'warm s':>7s} {'max |diff|':>10s}"
    )
    memories = []
    with tempfile.TemporaryDirectory(prefix="ember-compare-") as tmp:
        for model in args.models:
            r, onnx_path, artifact = compare(model, args, Path(tmp))
            ember_pct = r.flops / (r.ember_ms * 1e-3) * 1e-9 / peak * 100
            ort_pct = r.flops / (r.ort_ms * 1e-3) * 1e-9 / peak * 100
            cold = f"{r.cold_s:7.1f}" if r.cold_s is not None else f"{'-':>7s}"
            print(
                f"{r.model:20s} {r.ember_ms:9.2f} {r.ort_ms:9.2f} {r.ember_ms / r.ort_ms:9.2f} "
                f"{r.flops * 1e-9:6.2f} {ember_pct:8.1f}% {ort_pct:7.1f}% {cold} "
                f"{r.warm_s:7.1f} {r.max_diff:10.2e}",
                flush=True,
            )
            if r.busy is not None:
                ember_busy, ort_busy = r.busy
                slowdowns = f"ember {ember_busy / r.ember_ms:.2f}x, ORT {ort_busy / r.ort_ms:.2f}x"
                print(
                    f"{'  one core busy':20s} {ember_busy:9.2f} {ort_busy:9.2f} "
                    f"{ember_busy / ort_busy:9.2f}   slowdown: {slowdowns}",
                    flush=True,
                )
            if not args.no_memory:
                memories.append(measure_memory(model, onnx_path, artifact, args.threads))
    if memories:
        print(
            "\nPeak resident memory growth, load + 10 runs, each runtime in its own process (MiB)"
        )
        print(
            f"{'model':20s} {'ember':>7s} {'params':>7s} {'arena':>7s} {'rest':>7s} "
            f"{'ORT':>7s} {'ember/ORT':>9s}"
        )
        for m in memories:
            rest = m.ember_bytes - m.params_bytes - m.arena_bytes
            print(
                f"{m.model:20s} {m.ember_bytes / MiB:7.1f} {m.params_bytes / MiB:7.1f} "
                f"{m.arena_bytes / MiB:7.1f} {rest / MiB:7.1f} {m.ort_bytes / MiB:7.1f} "
                f"{m.ember_bytes / m.ort_bytes:9.2f}"
            )


if __name__ == "__main__":
    main()
