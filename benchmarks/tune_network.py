"""Does tuning pay off, and does its estimate hold? One network, end to end, as a user
runs it: `ember tune`, then the tuned artifact, the untuned one and ONNX Runtime timed
side by side.

    python benchmarks/tune_network.py MODEL [--trials 2000] [--seed 0] [--threads 2]
        [--timing auto] [--records LOG] [--repeat 20] [--block 5] [--extra ARG ...]

MODEL is an .onnx file or a built-in workload (exported to ONNX as benchmarks/compare.py
does, so that every runtime reads the same file). Steps:

1. `ember tune MODEL.onnx --trials N --seed S -o LOG` in a fresh process (skipped with
   --records, which times an existing log): its wall time, the search / build / run
   split and the estimated end-to-end latency it prints;
2. `ember compile` with and without the log;
3. the tuned artifact, the untuned one and an ONNX Runtime session (all with --threads
   threads, the same seeded input) timed in alternating blocks (compare.py's method:
   `--repeat` rounds of `--block` runs of each, each block after settling), medians;
4. printed: the estimate / the tuned artifact's median (the issue's "within 5%"), for
   the trials' estimate and the one after the check, each split at the chosen
   network's time as `ember tune`'s check measured it,
   tuned / ORT, untuned / ORT, and the largest output difference from ORT.
"""

from __future__ import annotations

import argparse
import os
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).parent))
from compare import (
    _compile,
    _onnx_file,
    add_alternation_arguments,
    fed_beside_ort,
    time_alternately,
)


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model", help=".onnx file or built-in workload")
    parser.add_argument("--trials", type=int, default=2000)
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--timing", default="auto", help="ember tune --timing (auto)")
    parser.add_argument("--records", help="time this existing log instead of tuning")
    parser.add_argument("--keep", help="directory to keep the log and artifacts in")
    add_alternation_arguments(parser)
    parser.add_argument(
        "--extra", nargs=argparse.REMAINDER, default=[], help="more `ember tune` arguments"
    )
    return parser.parse_args()


def tune(onnx_path: Path, log: Path, args: argparse.Namespace) -> tuple[float, str]:
    """Run `ember tune`, echoing its output; its wall time and output."""
    command = [sys.executable, "-m", "ember.cli", "tune", str(onnx_path), "-o", str(log)]
    command += ["--target", args.target, "--trials", str(args.trials), "--seed", str(args.seed)]
    command += ["--timing", args.timing, *args.extra]
    if args.input_shapes:
        command += ["--input-shapes", args.input_shapes]
    print("$", " ".join(command[2:]), flush=True)
    start = time.perf_counter()
    process = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    assert process.stdout is not None
    lines = []
    for line in process.stdout:
        lines.append(line)
        if not line.startswith("|"):  # the per-round tables: too long to echo
            print("  " + line, end="", flush=True)
    if process.wait() != 0:
        sys.exit("ember tune failed")
    return time.perf_counter() - start, "".join(lines)


def estimated_ms(output: str) -> float | None:
    """The last 'Estimated end-to-end latency: X ms' (or us) of `ember tune`'s output."""
    return _last_ms(r"Estimated end-to-end latency: ([\d.]+) (ms|us)", output)


def checked_estimate_ms(output: str) -> float | None:
    """The estimate after `ember tune`'s last check (each checked task's fastest time in
    the network), where it printed one."""
    return _last_ms(r"Estimated end-to-end latency after the check: ([\d.]+) (ms|us)", output)


def checked_ms(output: str) -> float | None:
    """The chosen network's time as `ember tune`'s last check measured it ('Measured in
    the network: X ms with the chosen schedules')."""
    return _last_ms(r"Measured in the network: ([\d.]+) (ms|us) with the chosen", output)


def _last_ms(pattern: str, output: str) -> float | None:
    found = re.findall(pattern, output)
    if not found:
        return None
    value, unit = found[-1]
    return float(value) * (1e-3 if unit == "us" else 1.0)


def main() -> None:
    args = _parse()
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from ember.runtime import load

    with tempfile.TemporaryDirectory(prefix="ember-tune-") as scratch:
        work = Path(args.keep or scratch)
        work.mkdir(parents=True, exist_ok=True)
        onnx_path = _onnx_file(args.model, args, work)
        name = Path(args.model).stem
        estimate = after_check = checked = None
        if args.records:
            log = Path(args.records)
        else:
            log = work / f"{name}.records.json"
            log.unlink(missing_ok=True)
            wall, output = tune(onnx_path, log, args)
            estimate, checked = estimated_ms(output), checked_ms(output)
            after_check = checked_estimate_ms(output)
            print(f"tuning wall time {wall:.0f} s", flush=True)
        tuned, untuned = work / f"{name}.tuned.tar", work / f"{name}.untuned.tar"
        compile_args = argparse.Namespace(
            target=args.target, input_shapes=args.input_shapes, tuning_records=str(log)
        )
        _compile(onnx_path, tuned, compile_args, None)
        compile_args.tuning_records = None
        _compile(onnx_path, untuned, compile_args, None)
        modules = [load(tuned), load(untuned)]
        session, feed = fed_beside_ort(modules, onnx_path, args.threads)
        runners = [modules[0].run, modules[1].run, lambda: session.run(None, feed)]
        tuned_ms, untuned_ms, ort_ms = time_alternately(runners, args)
        theirs = session.run(None, feed)
        diff = max(
            float(np.max(np.abs(modules[0].get_output(i) - want))) for i, want in enumerate(theirs)
        )
    print(
        f"{name}: tuned {tuned_ms:.3f} ms, untuned {untuned_ms:.3f} ms, ORT {ort_ms:.3f} ms; "
        f"tuned/ORT {tuned_ms / ort_ms:.3f}, untuned/ORT {untuned_ms / ort_ms:.3f}, "
        f"max |tuned - ORT| {diff:.2e}"
    )
    estimates = {"the trials' estimate": estimate, "the estimate after the check": after_check}
    for what, value in estimates.items():
        if value is None:
            continue
        print(f"{name}: {what} {value:.3f} ms / tuned {tuned_ms:.3f} ms = {value / tuned_ms:.3f}")
        if checked is not None:
            # Splits estimate / tuned into the estimate's own error (against the network
            # measured at the same moment) and the rest: the machine's drift since, and
            # the check's measure (each step's least of 3 profiles) against the
            # alternation's (medians of whole runs).
            print(
                f"{name}:   the check measured the chosen network at {checked:.3f} ms: "
                f"{what} / that {value / checked:.3f}, that / tuned {checked / tuned_ms:.3f} "
                "(drift since the check, and its least-of-profiles measure against whole-run "
                "medians)"
            )


if __name__ == "__main__":
    main()
