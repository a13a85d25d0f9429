"""The thread-count policy of a model run (`c/threads.h`), driven with made-up run
times through ctypes, so nothing here depends on how busy the machine is: a quiet
machine keeps every thread and probes ever more rarely; a machine where fewer threads
run faster (another program on a core) switches within a few runs and comes back when
the cores are free again; single slow runs do not move it; counts stay within 1 and the
maximum. Then the policy in a real library: on by default, off with
EMBER_ADAPTIVE_THREADS=0, and numbers that do not depend on the count."""

from __future__ import annotations

import ctypes
import os
import subprocess
import sys
import textwrap
from collections.abc import Callable
from pathlib import Path

import numpy as np
import pytest

import ember
from ember.build import build
from ember.runtime.aot import threads_header
from ember.toolchain import compile_shared

HARNESS_C = r"""
#define EXPORT __attribute__((visibility("default")))

/* Runs the policy for `runs` runs; run i on t threads takes seconds[(t - 1) * runs + i]
 * (a table per count); counts[i] receives the count run i used. */
EXPORT void drive(int32_t max_threads, int32_t runs, const double* seconds, int32_t* counts) {
  ember_thread_policy policy;
  ember_threads_init(&policy, max_threads);
  for (int32_t i = 0; i < runs; ++i) {
    int32_t threads = ember_threads_next(&policy);
    counts[i] = threads;
    ember_threads_observe(&policy, threads, seconds[(threads - 1) * runs + i]);
  }
}
"""


@pytest.fixture(scope="module")
def drive() -> Callable[..., list[int]]:
    library = ctypes.CDLL(str(compile_shared([threads_header() + HARNESS_C], "llvm")))

    def run(max_threads: int, seconds: np.ndarray) -> list[int]:
        """seconds[t - 1, i]: how long run i takes on t threads."""
        table = np.ascontiguousarray(seconds, dtype=np.float64)
        runs = table.shape[1]
        counts = (ctypes.c_int32 * runs)()
        library.drive(
            ctypes.c_int32(max_threads),
            ctypes.c_int32(runs),
            table.ctypes.data_as(ctypes.POINTER(ctypes.c_double)),
            counts,
        )
        return list(counts)

    return run


def test_a_quiet_machine_keeps_every_thread_and_probes_ever_more_rarely(drive) -> None:
    runs = 1000
    counts = drive(2, np.stack([np.full(runs, 0.010), np.full(runs, 0.006)]))
    probes = [i for i, count in enumerate(counts) if count != 2]
    assert counts[0] == 2
    # Intervals 4, 8, 16, 32, then every 64 runs: about one run in 64 tries one thread.
    assert len(probes) <= 4 + runs // 64 + 1
    gaps = np.diff(probes)
    assert gaps[-1] == 65 and list(gaps[:3]) == [9, 17, 33]


def test_switches_to_fewer_threads_when_they_are_faster_and_back(drive) -> None:
    runs = 600
    # Runs 0-199 quiet (2 threads 6 ms, 1 thread 10 ms), 200-399 another program on a
    # core (2 threads 17 ms, 1 thread 11 ms), then quiet again.
    two = np.full(runs, 0.006)
    one = np.full(runs, 0.010)
    two[200:400], one[200:400] = 0.017, 0.011
    counts = drive(2, np.stack([one, two]))
    assert counts[150:200].count(1) <= 1
    # Two slow runs, then a probe on one thread that wins and a duel (1, 2, 1, 2).
    assert counts[202:206] == [1, 2, 1, 2]
    assert counts[206:210] == [1] * 4  # then a probe of two threads after 4 runs
    busy = counts[206:400]
    assert busy.count(2) <= 10, busy  # probes of two threads, ever more rarely
    back = next(i for i in range(400, runs) if counts[i : i + 5] == [2] * 5)
    assert back <= 400 + 64 + 10  # within one interval and a duel


def test_a_short_burst_of_load_does_not_switch(drive) -> None:
    runs = 300
    two, one = np.full(runs, 0.006), np.full(runs, 0.010)
    # Three runs slowed (another program's threads finishing), one thread faster then.
    two[200:203], one[200:203] = 0.017, 0.011
    counts = drive(2, np.stack([one, two]))
    assert counts[202:206] == [1, 2, 1, 2]  # the probe wins, the duel does not
    assert counts[206:210] == [2] * 4


def test_single_slow_runs_do_not_move_it(drive) -> None:
    runs = 400
    two = np.full(runs, 0.006)
    two[::10] = 0.030  # a hiccup every tenth run
    counts = drive(2, np.stack([np.full(runs, 0.010), two]))
    assert counts.count(1) <= 4 + runs // 64 + 1


def test_climbs_to_the_best_count_within_the_maximum(drive) -> None:
    runs = 2000
    # Eight threads at most; five cores are free: fastest on 5, slower either side.
    best = 5
    seconds = [np.full(runs, 0.010 * (1 + abs(t - best) / 4)) for t in range(1, 9)]
    counts = drive(8, np.stack(seconds))
    assert set(counts) <= set(range(1, 9))
    assert counts[-100:].count(best) >= 90


def test_one_thread_at_most_turns_it_off(drive) -> None:
    counts = drive(1, np.full((1, 50), 0.001))
    assert counts == [1] * 50


RUN_TWICE = textwrap.dedent(
    """
    import sys
    import numpy as np
    from ember.runtime import load
    module = load(sys.argv[1])
    x = np.linspace(-3, 3, num=int(np.prod(module.inputs[0].shape)), dtype=np.float32)
    module.set_input(0, x.reshape(module.inputs[0].shape))
    outputs = []
    for _ in range(40):
        module.run()
        outputs.append(module.get_output(0))
    assert all(np.array_equal(out, outputs[0]) for out in outputs)
    print(module.threads)
    np.save(sys.argv[2], outputs[0])
    """
)


@pytest.mark.parametrize("adaptive", ["1", "0"])
def test_runs_in_a_library_use_the_policy_and_agree_bit_for_bit(
    adaptive: str, tmp_path: Path
) -> None:
    graph, params = ember.testing.get_workload(
        "resnet-18", layout="NHWC", image_shape=(32, 32, 3), num_classes=10
    )
    artifact = build(graph, "llvm", params=params).export_library(tmp_path / "net.tar")
    results = {}
    for threads in ("1", "2"):
        env = {**os.environ, "OMP_NUM_THREADS": threads, "EMBER_ADAPTIVE_THREADS": adaptive}
        out = tmp_path / f"out{threads}.npy"
        done = subprocess.run(
            [sys.executable, "-c", RUN_TWICE, str(artifact), str(out)],
            env=env,
            capture_output=True,
            text=True,
            check=True,
        )
        count = int(done.stdout.split()[-1])
        assert 1 <= count <= int(threads)
        if adaptive == "0":
            assert count == int(threads)
        results[threads] = np.load(out)
    np.testing.assert_array_equal(results["1"], results["2"])
