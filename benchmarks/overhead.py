"""Executor overhead: what one kernel call and one OpenMP fork/join cost, against ONNX
Runtime on the same trivial graph.

    python benchmarks/overhead.py [--threads 2] [--groups 50] [--rounds 20] [--inner 200]
        [--settle-ms 100] [--shapes 1x64 1x28x28x64]

The graph is a chain of `--groups` trivial steps, x = relu(x) + x: the value x is read
twice, so Ember's fuser makes each relu + add one group (one kernel call), and ONNX
Runtime runs two nodes per step. For each tensor shape:
- 1x64 (256 bytes): Ember's kernels are serial, so the time is the call itself;
- 1x28x28x64 (200 KB): the kernels run an `omp parallel for`, so each call also forks
  and joins the thread team.
The per-call overhead is the slope between the chain and a one-step graph, which
cancels what every run pays once (Python, ctypes, ORT's session.run setup):
(t(groups) - t(1)) / (groups - 1) per Ember kernel call, per ORT node likewise (nodes
counted in ORT's optimised graph). Ember is timed both from Python (module.run, as
ORT's session.run is) and in C (module.benchmark); Ember and ORT alternate in blocks of
`--inner` runs, each after `--settle-ms` of untimed runs (see compare.py for why).

Last, the OpenMP runtime alone, in a C loop compiled by Ember's toolchain: an empty
`#pragma omp parallel` region and a `parallel for` of one iteration per thread, against
a plain call, with 1 and `--threads` threads.
"""

from __future__ import annotations

import argparse
import ctypes
import os
import statistics
import tempfile
import time
from collections.abc import Callable
from pathlib import Path

import numpy as np

FORK_JOIN_SOURCE = """
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
#include <omp.h>

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}

__attribute__((noinline)) void plain_call(volatile int* sink, int value) { *sink = value; }

/* Nanoseconds per region: kind 0 a plain call, 1 an empty parallel region,
 * 2 a parallel for with one iteration per thread. */
double region_ns(int64_t count, int32_t threads, int32_t kind) {
  volatile int sink = 0;
  double start = now();
  for (int64_t i = 0; i < count; ++i) {
    if (kind == 0) {
      plain_call(&sink, (int)i);
    } else if (kind == 1) {
      #pragma omp parallel num_threads(threads)
      { sink = omp_get_thread_num(); }
    } else {
      #pragma omp parallel for num_threads(threads)
      for (int32_t j = 0; j < threads; ++j) sink = j;
    }
  }
  return (now() - start) / (double)count * 1e9;
}
"""


def chain_graph(groups: int, shape: tuple[int, ...]):  # type: ignore[no-untyped-def]
    """x = relu(x) + x, `groups` times: one fused group (relu + add) per step."""
    from ember.graph.builder import GraphBuilder

    builder = GraphBuilder(f"chain{groups}")
    x = builder.input("data", shape, "float32")
    for step in range(groups):
        activated = builder.add("relu", [x], name=f"relu{step}")
        x = builder.add("add", [activated, x], name=f"add{step}")
    return builder.build([x])


def _ort_session(model_bytes: bytes, threads: int, optimized: Path):  # type: ignore[no-untyped-def]
    import onnxruntime

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    options.graph_optimization_level = onnxruntime.GraphOptimizationLevel.ORT_ENABLE_ALL
    options.optimized_model_filepath = str(optimized)
    options.log_severity_level = 3  # no warning about saving the optimised model
    return onnxruntime.InferenceSession(
        model_bytes, sess_options=options, providers=["CPUExecutionProvider"]
    )


class Network:
    """One chain, built by Ember and loaded in ONNX Runtime, with the same input."""

    def __init__(self, groups: int, shape: tuple[int, ...], threads: int, work: Path) -> None:
        import onnx

        import ember
        from ember.testing import to_onnx

        graph, params = chain_graph(groups, shape)
        library = ember.build(graph, "llvm", params=params)
        self.kernel_calls = len(library.metadata["groups"])  # type: ignore[arg-type]
        self.parallel = any("omp parallel" in k.c_source for k in library.sources.kernels)
        self.module = library.load()
        data = np.random.default_rng(0).standard_normal(shape).astype(np.float32)
        self.module.set_input("data", data)
        optimized = work / f"ort-{groups}.onnx"
        self.session = _ort_session(to_onnx(graph, params).SerializeToString(), threads, optimized)
        self.ort_nodes = len(onnx.load(optimized).graph.node)
        self.feed = {self.session.get_inputs()[0].name: data}

    def run_ember(self) -> None:
        self.module.run()

    def run_ort(self) -> None:
        self.session.run(None, self.feed)


def _per_run(function: Callable[[], None], count: int) -> float:
    start = time.perf_counter()
    for _ in range(count):
        function()
    return (time.perf_counter() - start) / count


def _settle(run: Callable[[], None], settle_ms: float) -> None:
    """Run untimed for `settle_ms`: the other runtime's threads stop spinning (ORT's
    spin ~50 ms after a run, slowing OpenMP kernels meanwhile)."""
    deadline = time.perf_counter() + settle_ms * 1e-3
    run()
    while time.perf_counter() < deadline:
        run()


def measure(networks: list[Network], args: argparse.Namespace) -> dict[str, list[float]]:
    """Median seconds per run of each network: Ember from Python, Ember in C, ORT;
    in each round, a block of `--inner` runs of each after settling."""
    samples: dict[str, list[list[float]]] = {
        what: [[] for _ in networks] for what in ("ember", "ember_c", "ort")
    }
    for _ in range(args.rounds):
        for index, network in enumerate(networks):
            _settle(network.run_ember, args.settle_ms)
            samples["ember"][index].append(_per_run(network.run_ember, args.inner))
            result = network.module.benchmark(repeat=1, number=args.inner, min_repeat_ms=0)
            samples["ember_c"][index].append(result.seconds[0])
            _settle(network.run_ort, args.settle_ms)
            samples["ort"][index].append(_per_run(network.run_ort, args.inner))
    return {what: [statistics.median(s) for s in runs] for what, runs in samples.items()}


def report_shape(shape: tuple[int, ...], args: argparse.Namespace, work: Path) -> None:
    one, chain = (Network(n, shape, args.threads, work) for n in (1, args.groups))
    medians = measure([one, chain], args)
    calls = chain.kernel_calls - one.kernel_calls
    nodes = chain.ort_nodes - one.ort_nodes
    size = "x".join(map(str, shape))
    kind = "parallel (omp parallel for)" if chain.parallel else "serial"
    print(
        f"\ntensor {size} ({int(np.prod(shape)) * 4} bytes), Ember kernels {kind}: "
        f"{chain.kernel_calls} Ember kernel calls, {chain.ort_nodes} ORT nodes"
    )
    print(f"  {'':32s} {'1 step':>10s} {f'{args.groups} steps':>10s} {'per call':>10s}")
    for what, label, count in (
        ("ember", "Ember module.run (Python)", calls),
        ("ember_c", "Ember in C (ember_benchmark)", calls),
        ("ort", "ORT session.run (Python)", nodes),
    ):
        short, long = medians[what]
        per_call = (long - short) / count
        unit = "kernel call" if what != "ort" else "node"
        print(
            f"  {label:32s} {short * 1e6:8.3f}us {long * 1e6:8.3f}us "
            f"{per_call * 1e9:8.0f}ns per {unit}"
        )
    per_step_ember = (medians["ember_c"][1] - medians["ember_c"][0]) / calls
    per_step_ort = (medians["ort"][1] - medians["ort"][0]) / (args.groups - 1)
    print(
        f"  per step of the chain (relu + add): Ember {per_step_ember * 1e9:.0f}ns, "
        f"ORT {per_step_ort * 1e9:.0f}ns ({per_step_ort / per_step_ember:.1f}x)"
    )
    profile = chain.module.profile(repeat=args.rounds)
    steps = sorted(row.seconds for row in profile.rows)
    print(
        f"  Ember profile of the chain: median step {statistics.median(steps) * 1e9:.0f}ns "
        f"(including one clock read), total {profile.total_seconds * 1e6:.2f}us"
    )


def report_fork_join(threads: int) -> None:
    from ember.runtime.abi import load_library
    from ember.toolchain import compile_shared, find_compiler

    # Through Ember's loader: the compiler's OpenMP runtime (libgomp, or libomp for clang)
    # with the wait policy Ember's kernels run under.
    library = load_library(compile_shared([FORK_JOIN_SOURCE], "llvm"))
    library.region_ns.restype = ctypes.c_double
    library.region_ns.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.c_int32]
    runtime = "libomp" if find_compiler("llvm").family == "clang" else "libgomp"
    print(f"\nOpenMP alone ({runtime}, C loop of 100000; median of 7):")
    for team in sorted({1, threads}):
        row = []
        for kind, label in ((0, "plain call"), (1, "empty parallel"), (2, "parallel for")):
            library.region_ns(10000, team, kind)  # warm-up: create the thread team
            ns = statistics.median(library.region_ns(100000, team, kind) for _ in range(7))
            row.append(f"{label} {ns:7.0f}ns")
        print(f"  {team} thread{'s' if team > 1 else ' '}: " + ", ".join(row))


def _shape(text: str) -> tuple[int, ...]:
    return tuple(int(d) for d in text.split("x"))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--groups", type=int, default=50, help="steps in the chain")
    parser.add_argument("--rounds", type=int, default=20, help="alternating rounds")
    parser.add_argument("--settle-ms", type=float, default=100, help="untimed before each block")
    parser.add_argument("--inner", type=int, default=200, help="runs per round and network")
    parser.add_argument("--shapes", nargs="+", type=_shape, default=[(1, 64), (1, 28, 28, 64)])
    args = parser.parse_args()
    # OpenMP reads this when the first library loads: before any load.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(
        f"Executor overhead: chain of {args.groups} x (relu + add), {args.threads} threads, "
        f"medians of {args.rounds} rounds x {args.inner} runs"
    )
    with tempfile.TemporaryDirectory(prefix="ember-overhead-") as tmp:
        for shape in args.shapes:
            report_shape(shape, args, Path(tmp))
    report_fork_join(args.threads)


if __name__ == "__main__":
    main()
