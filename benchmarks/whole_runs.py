"""Whole runs against the per-step profile: how much of a network's time as a user
times it (the median of whole runs) the profile's sum leaves out, on this machine now.

    python benchmarks/whole_runs.py ARTIFACT [--rounds 3] [--runs 10] [--threads 2]

ARTIFACT is what `ember compile` wrote. Each round profiles the network as `ember
tune`'s calibration does (`in_network_times`: each step's least median over three
profiles of 20 runs) and times whole runs in C (`whole_run_seconds`, blocks after each
profile), and prints both and their ratio: the whole-run factor `ember tune`'s
calibration prints. On a quiet machine it is ~1; another tenant's bursts fall on whole
runs but not on each step's median.
"""

from __future__ import annotations

import argparse
import os


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("artifact", help="an artifact `ember compile` wrote")
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument(
        "--runs", type=int, default=10, help="whole runs per round (rounded up to a multiple of 3)"
    )
    parser.add_argument("--threads", type=int, default=2)
    args = parser.parse_args()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from ember.autoschedule.calibration import (
        alternating_in_network_times,
        run_factor,
        set_random_inputs,
        whole_run_seconds,
    )
    from ember.runtime import load

    module = load(args.artifact)
    set_random_inputs(module)
    factors = []
    for number in range(args.rounds):
        ((_, _, profiled),) = alternating_in_network_times([module], [])
        (run,) = whole_run_seconds([module], args.runs)
        factors.append(run_factor(run, profiled))
        print(
            f"round {number + 1}: profile {profiled * 1e3:.3f} ms, whole runs "
            f"{run * 1e3:.3f} ms (median): {factors[-1]:.3f}x",
            flush=True,
        )
    print(f"run factor {min(factors):.3f}-{max(factors):.3f}")
    module.close()


if __name__ == "__main__":
    main()
