"""This machine's fp32 FMA peak, measured with a generated micro-kernel.

    python benchmarks/peak.py [--threads 1 2] [--chains 8 16 24] [--target llvm]

The micro-kernel is C that Ember's toolchain compiles with the flags kernels get
(`-O3 -march=native -ffp-contract=fast -fopenmp`): `chains` independent accumulators
of the target's vector type (GCC vector extensions, 16 fp32 lanes with AVX-512), each
updated `acc = acc * x + y` (one FMA instruction) in an unrolled loop, so the FMA
units never wait for a result; every OpenMP thread runs the loop on its own
registers. GFLOP/s = 2 * lanes * chains * iterations * threads / seconds, the best of
`--repeat` measurements of about `--seconds` each. Enough chains cover the FMA latency
times the number of FMA ports (4 cycles x 2 ports = 8 on recent x86-64); more cost
nothing while they fit in the registers (32 with AVX-512).

`measure_peak(threads)` is what compare.py and the other benchmarks import to report
results as a percentage of peak.
"""

from __future__ import annotations

import argparse
import ctypes
import functools
import os

from ember.device import device_model
from ember.runtime.abi import load_library
from ember.target import Target
from ember.toolchain import compile_shared

DEFAULT_CHAINS = (8, 12, 16, 24)


def micro_kernel_source(lanes: int, chains: int) -> str:
    """C defining `double fma_seconds(int64_t iterations, int32_t threads, float*
    sink)`: the wall time of `threads` threads each running `iterations` rounds of
    `chains` independent vector FMAs.

    The rounds run in a function taking and returning the vector type: where
    -march=native tunes for 256-bit vectors (clang on recent Intel cores), clang
    splits a 512-bit type into two 256-bit halves in a function without such a
    parameter, and timed half the FMA peak (its min-legal-vector-width; Ember's kernels
    pass vectors to their helpers, so they keep the full width)."""
    updates = "\n".join(f"    a{i} = a{i} * x + y;" for i in range(chains))
    starts = "\n".join(f"  vec a{i} = x * (float)({i + 1});" for i in range(chains))
    total = " + ".join(f"a{i}" for i in range(chains))
    return f"""
#define _POSIX_C_SOURCE 200809L
#include <stdint.h>
#include <time.h>
typedef float vec __attribute__((vector_size({4 * lanes})));

static double now(void) {{
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return (double)t.tv_sec + 1e-9 * (double)t.tv_nsec;
}}

static vec rounds(vec x, vec y, int64_t iterations) {{
{starts}
  for (int64_t i = 0; i < iterations; ++i) {{
{updates}
  }}
  return {total};
}}

double fma_seconds(int64_t iterations, int32_t threads, float* sink) {{
  double start = now();
  #pragma omp parallel num_threads(threads)
  {{
    /* x and y from memory the compiler cannot see through, so nothing folds. */
    volatile float seed = sink[0];
    vec x = (vec){{0}} + (float)seed * 1e-9f + 0.999999f;
    vec y = (vec){{0}} + (float)seed * 1e-9f + 1e-7f;
    vec sum = rounds(x, y, iterations);
    float result = 0;
    for (int32_t lane = 0; lane < {lanes}; ++lane) result += sum[lane];
    #pragma omp atomic
    sink[1] += result;
  }}
  return now() - start;
}}
"""


@functools.cache
def _micro_kernel(lanes: int, chains: int, target: str) -> ctypes.CDLL:
    library = load_library(compile_shared([micro_kernel_source(lanes, chains)], target))
    library.fma_seconds.restype = ctypes.c_double
    library.fma_seconds.argtypes = [ctypes.c_int64, ctypes.c_int32, ctypes.POINTER(ctypes.c_float)]
    return library


def measure_peak(
    threads: int = 1,
    chains: int = 24,
    target: str = "llvm",
    seconds: float = 0.2,
    repeat: int = 5,
) -> float:
    """GFLOP/s of `threads` threads running `chains` FMA chains each (best of `repeat`)."""
    lanes = device_model(Target(target)).fp32_lanes
    library = _micro_kernel(lanes, chains, target)
    sink = (ctypes.c_float * 2)(1.0, 0.0)
    iterations = 1000
    while (elapsed := library.fma_seconds(iterations, threads, sink)) < seconds / 4:
        iterations *= 4 if elapsed < seconds / 100 else 2
    iterations = int(iterations * seconds / elapsed)
    best = min(library.fma_seconds(iterations, threads, sink) for _ in range(repeat))
    return 2 * lanes * chains * iterations * threads / best * 1e-9


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, nargs="+", default=[1, os.cpu_count() or 1])
    parser.add_argument("--chains", type=int, nargs="+", default=list(DEFAULT_CHAINS))
    parser.add_argument("--target", default="llvm")
    parser.add_argument("--seconds", type=float, default=0.2, help="per measurement")
    parser.add_argument("--repeat", type=int, default=5, help="measurements; the best counts")
    args = parser.parse_args()
    lanes = device_model(Target(args.target)).fp32_lanes
    print(f"fp32 FMA peak, target {args.target} ({lanes} fp32 lanes), best of {args.repeat}")
    print(f"{'threads':>7}  {'chains':>6}  {'GFLOP/s':>8}  {'per thread':>10}")
    for threads in args.threads:
        for chains in args.chains:
            gflops = measure_peak(threads, chains, args.target, args.seconds, args.repeat)
            print(f"{threads:>7}  {chains:>6}  {gflops:>8.1f}  {gflops / threads:>10.1f}")


if __name__ == "__main__":
    main()
