"""The candidate timer in C (`c/measure.c` on the timing loop of `timing.h`), driven
through ctypes: with a prepare step, every timed call comes right after one; and
cold-weights eviction really sends a weight's cache lines to memory while the other
arguments stay cached, on this machine's path (clflushopt or clflush / dc civac), with
clflush, and on the portable one (a flush of the last-level cache, then the other
arguments read back).

The eviction is observed with a pointer chase: a chain of dependent loads over 4096
cache lines (256 KiB, inside the L2 of current CPUs) in random order, so no prefetcher
hides where the lines are. From the L1 or L2 each step is a few nanoseconds; after an
eviction each is a trip to memory (~100 ns). The assertion leaves a factor 3 of the
~20 between them, on the fastest of several trials (a preempted trial only gets slower,
never a cold chase faster), so a busy machine does not make it fail."""

from __future__ import annotations

import ctypes
import platform
from pathlib import Path

import numpy as np
import pytest

from ember.autoschedule.runner import timer_source
from ember.toolchain import compile_shared

HARNESS_C = r"""
#define EXPORT __attribute__((visibility("default")))

/* The loop: how many calls, prepares, and calls that came right after a prepare. */
typedef struct {
  int64_t runs;
  int64_t prepares;
  int64_t prepared_runs;
  int32_t prepared;
} counts;

static int32_t count_run(void* context) {
  counts* seen = context;
  seen->runs += 1;
  seen->prepared_runs += seen->prepared;
  seen->prepared = 0;
  return 0;
}

static void count_prepare(void* context) {
  counts* seen = context;
  seen->prepares += 1;
  seen->prepared = 1;
}

EXPORT int32_t loop_counts(int32_t with_prepare, int32_t number, int32_t repeat,
                           int64_t* runs, int64_t* prepares, int64_t* prepared_runs) {
  counts seen = {0, 0, 0, 0};
  double seconds[16];
  int32_t status = with_prepare
      ? ember_time_prepared(count_run, &seen, count_prepare, &seen, number, repeat, 0.0, 0,
                            0.0, seconds)
      : ember_time_repeats(count_run, &seen, number, repeat, 0.0, 0, 0.0, seconds);
  *runs = seen.runs;
  *prepares = seen.prepares;
  *prepared_runs = seen.prepared_runs;
  return status;
}

EXPORT int64_t timing_more(int64_t runs, double elapsed, double min_repeat_ms) {
  return ember_timing_more(runs, elapsed, min_repeat_ms);
}

/* Seconds to follow `steps` links of the chain in `chain` (word indices). */
static double chase(const uint64_t* chain, int64_t steps) {
  uint64_t at = 0;
  double start = ember_timing_now();
  for (int64_t i = 0; i < steps; ++i) at = ((const volatile uint64_t*)chain)[at];
  double seconds = ember_timing_now() - start;
  *(volatile uint64_t*)&at = at;
  return seconds;
}

/* The fastest of `trials` chases over `weight` (arg 0, a weight) and `activation` (arg
 * 1, not one) after evict_weights, and over `weight` when warm. */
EXPORT int32_t chase_after_eviction(uint64_t* weight, uint64_t* activation, int64_t bytes,
                                    int64_t steps, int32_t trials, double* warm_weight,
                                    double* cold_weight, double* activation_after) {
  void* args[2] = {weight, activation};
  int64_t arg_bytes[2] = {bytes, bytes};
  int32_t arg_is_weight[2] = {1, 0};
  weight_eviction eviction = {args, arg_bytes, arg_is_weight, 2, NULL, 0};
  if (!EVICT_BY_LINE) {
    eviction.flush_bytes = ember_timing_flush_bytes();
    eviction.flush_buffer = malloc(eviction.flush_bytes);
    if (eviction.flush_buffer == NULL) return 1;
  }
  *warm_weight = *cold_weight = *activation_after = 1e9;
  for (int32_t trial = 0; trial < trials; ++trial) {
    chase(weight, steps);
    chase(activation, steps);
    double warm = chase(weight, steps);
    chase(weight, steps);
    evict_weights(&eviction);
    double activation_time = chase(activation, steps);
    evict_weights(&eviction);
    double cold = chase(weight, steps);
    if (warm < *warm_weight) *warm_weight = warm;
    if (cold < *cold_weight) *cold_weight = cold;
    if (activation_time < *activation_after) *activation_after = activation_time;
  }
  free(eviction.flush_buffer);
  return 0;
}
"""

LINES = 4096
WORDS_PER_LINE = 8  # 64-byte lines of uint64


# How c/measure.c evicts a line: its own choice for this machine (clflushopt on an x86
# that has it), clflush, or the portable flush of the whole last-level cache.
EVICTIONS = {
    "by-line": "",
    "clflush": "#define EMBER_MEASURE_CLFLUSH 1\n",
    "portable": "#define EMBER_MEASURE_PORTABLE_EVICTION 1\n",
}


def harness(eviction: str = "by-line") -> ctypes.CDLL:
    define = EVICTIONS[eviction]
    path: Path = compile_shared([define + timer_source() + HARNESS_C], "llvm")
    library = ctypes.CDLL(str(path))
    library.loop_counts.restype = ctypes.c_int32
    library.chase_after_eviction.restype = ctypes.c_int32
    library.timing_more.restype = ctypes.c_int64
    library.timing_more.argtypes = [ctypes.c_int64, ctypes.c_double, ctypes.c_double]
    return library


def chain(seed: int) -> np.ndarray:
    """One uint64 a cache line: a single cycle through all LINES lines, in random
    order; each line's first word is the word index of the next line's."""
    order = np.random.default_rng(seed).permutation(LINES)
    words = np.zeros(LINES * WORDS_PER_LINE, dtype=np.uint64)
    # The chase starts at word 0: rotate the cycle so line 0 is first.
    order = np.roll(order, -int(np.flatnonzero(order == 0)[0]))
    words[order * WORDS_PER_LINE] = np.roll(order, -1) * WORDS_PER_LINE
    return words


@pytest.mark.parametrize("with_prepare", [True, False])
def test_every_timed_call_follows_a_prepare(with_prepare: bool) -> None:
    counts = [ctypes.c_int64() for _ in range(3)]
    status = harness().loop_counts(
        int(with_prepare), 3, 2, *(ctypes.byref(count) for count in counts)
    )
    runs, prepares, prepared_runs = (count.value for count in counts)
    assert status == 0
    assert runs == 1 + 3 * 2  # the warm-up, then 2 repeats of 3
    # The warm-up is not prepared; each timed call is, alone; without a prepare step
    # (a model's ember_benchmark) nothing is.
    assert (prepares, prepared_runs) == ((6, 6) if with_prepare else (0, 0))


def test_a_repeat_grows_through_a_pilot_to_just_past_its_minimum() -> None:
    """`ember_timing_more` (the batches of a repeat, all of whose calls count): from a
    few calls, a pilot of about a tenth of min_repeat_ms; from the pilot on, the rest
    of the repeat with 5% to spare, not a batch 1.618 times larger thrown in on top."""
    more = harness().timing_more
    # 3 calls of 0.1 ms against 100 ms: a pilot to about 10 ms (100 calls in all).
    pilot = 3 + more(3, 0.3e-3, 100.0)
    assert 100 <= pilot <= 102
    # A pilot of 0.05 ms calls that lasted 10 ms: the repeat ends at 105 ms.
    total = 200 + more(200, 10e-3, 100.0)
    assert 2100 <= total <= 2102
    # 95 ms of 100: 10 ms more (to 105 ms), not 1.618 times as many calls.
    assert 105 <= more(1000, 95e-3, 100.0) <= 108
    # Calls too short to see: the count doubles.
    assert more(8, 0.0, 100.0) == 9
    # The growth while piloting is at least 1.618 times.
    assert 5 + more(5, 9e-3, 1000.0) >= 5 * 1.618


# A comparison of timings (however wide its margin, a neighbour thrashing the shared
# caches can make the cached chase slow): the slow tier's, not `make test`'s.
@pytest.mark.slow
@pytest.mark.parametrize("eviction", list(EVICTIONS))
def test_evict_weights_sends_only_the_weights_to_memory(eviction: str) -> None:
    if eviction == "clflush" and platform.machine().lower() not in ("x86_64", "amd64"):
        pytest.skip("clflush is x86's; elsewhere the by-line path is the machine's own")
    weight, activation = chain(0), chain(1)
    times = [ctypes.c_double() for _ in range(3)]
    status = harness(eviction).chase_after_eviction(
        weight.ctypes.data_as(ctypes.c_void_p),
        activation.ctypes.data_as(ctypes.c_void_p),
        ctypes.c_int64(weight.nbytes),
        ctypes.c_int64(LINES),
        5,
        *(ctypes.byref(t) for t in times),
    )
    assert status == 0
    warm, cold, activation_after = (t.value for t in times)
    assert cold > 3 * warm, f"evicted chase {cold * 1e6:.0f} us, cached {warm * 1e6:.0f} us"
    assert cold > 3 * activation_after, (
        f"the activation chase took {activation_after * 1e6:.0f} us after the eviction, "
        f"as long as an evicted one ({cold * 1e6:.0f} us)"
    )
