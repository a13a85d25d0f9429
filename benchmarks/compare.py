"""Ember against ONNX Runtime on whole networks: the same input, the same thread count,
one process, timed alternately.

    python benchmarks/compare.py resnet-50 mobilenet_v2 [model.onnx ...]
        [--threads 2] [--repeat 30] [--batch-size 1] [--layout NHWC] [--input-shapes S]

For each model (an .onnx file or a built-in workload name):
- compile time: `ember compile` in a fresh process, first with EMBER_CACHE_DIR at an
  empty temporary directory (cold: every kernel is generated and compiled), then
  again with the same directory (warm: kernels come from the cache);
- run time: the artifact that compile wrote, loaded with `ember.runtime.load`, and
  ONNX Runtime (all graph optimisations, CPU provider), each run once per round,
  alternately, `--repeat` rounds after warm-up; the medians and their ratio.

A built-in workload is compiled by Ember in `--layout` (NHWC by default, Ember's CPU
layout) and given to ONNX Runtime as ember.testing.to_onnx exports it in NCHW (ONNX's
layout); both have the same weights, and the input is the same image transposed. The
largest difference between the two outputs is printed as a sanity check.
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass
class Result:
    model: str
    ember_ms: float
    ort_ms: float
    cold_s: float
    warm_s: float
    max_diff: float


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("models", nargs="+", help=".onnx files or built-in workload names")
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=30)
    parser.add_argument("--batch-size", type=int, default=1, help="for built-in workloads")
    parser.add_argument("--layout", default="NHWC", choices=("NHWC", "NCHW"))
    parser.add_argument("--target", default="llvm")
    parser.add_argument(
        "--input-shapes", help="for .onnx files with symbolic dimensions, as `ember compile`"
    )
    return parser.parse_args()


def _prepare(model: str, args: argparse.Namespace, work: Path) -> tuple[list[str], Path]:
    """The `ember compile` arguments that read `model`, and the ONNX file for ORT."""
    from ember.testing import get_workload, list_workloads, to_onnx

    if model not in list_workloads():
        shapes = ["--input-shapes", args.input_shapes] if args.input_shapes else []
        return [model, *shapes], Path(model)
    graph, params = get_workload(model, batch_size=args.batch_size, layout="NCHW")
    onnx_path = work / f"{model}.onnx"
    to_onnx(graph, params, onnx_path)
    return [model, "--batch-size", str(args.batch_size), "--layout", args.layout], onnx_path


def _compile(compile_args: list[str], artifact: Path, cache: Path, target: str) -> float:
    """Wall time of `ember compile` in a fresh process using kernel cache `cache`."""
    env = {**os.environ, "EMBER_CACHE_DIR": str(cache)}
    command = [sys.executable, "-m", "ember.cli", "compile", *compile_args]
    command += ["--target", target, "-o", str(artifact)]
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


def _feeds(session, module, channels_last: bool):  # type: ignore[no-untyped-def]
    """One input per ORT input, and the same arrays as the Ember module takes them
    (transposed to channels-last when the workload was compiled so)."""
    rng = np.random.default_rng(0)
    ort_feed, ember_feed = {}, {}
    for ort_input, spec in zip(session.get_inputs(), module.inputs, strict=True):
        dtype = np.dtype(spec.dtype)
        shape = tuple(ort_input.shape) if channels_last else spec.shape
        if dtype.kind == "f":
            array = rng.uniform(0, 1, size=shape).astype(dtype)
        else:  # token ids and masks: 0/1 is valid for both
            array = rng.integers(0, 2, size=shape).astype(dtype)
        ort_feed[ort_input.name] = array
        ember_feed[spec.name] = np.moveaxis(array, 1, -1).copy() if channels_last else array
    return ort_feed, ember_feed


def _time_alternately(module, session, ort_feed, repeat: int) -> tuple[float, float]:  # type: ignore[no-untyped-def]
    for _ in range(3):  # warm-up: first-touch page faults, thread pools, caches
        module.run()
        session.run(None, ort_feed)
    ember_times, ort_times = [], []
    for _ in range(repeat):
        start = time.perf_counter()
        module.run()
        ember_times.append(time.perf_counter() - start)
        start = time.perf_counter()
        session.run(None, ort_feed)
        ort_times.append(time.perf_counter() - start)
    return 1e3 * statistics.median(ember_times), 1e3 * statistics.median(ort_times)


def compare(model: str, args: argparse.Namespace, work: Path) -> Result:
    from ember.runtime import load
    from ember.testing import list_workloads

    compile_args, onnx_path = _prepare(model, args, work)
    artifact = work / f"{Path(model).stem}.tar"
    cache = Path(tempfile.mkdtemp(dir=work, prefix="cache-"))
    cold = _compile(compile_args, artifact, cache, args.target)
    warm = _compile(compile_args, artifact, cache, args.target)
    module = load(artifact)
    session = _ort_session(onnx_path, args.threads)
    channels_last = model in list_workloads() and args.layout == "NHWC"
    ort_feed, ember_feed = _feeds(session, module, channels_last)
    for name, array in ember_feed.items():
        module.set_input(name, array)
    ember_ms, ort_ms = _time_alternately(module, session, ort_feed, args.repeat)
    theirs = session.run(None, ort_feed)
    diffs = [float(np.max(np.abs(module.get_output(i) - want))) for i, want in enumerate(theirs)]
    return Result(model, ember_ms, ort_ms, cold, warm, max(diffs))


def main() -> None:
    args = _parse()
    # OpenMP reads this when the first kernel library loads: set it before any load,
    # and the compile subprocesses inherit it.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    print(
        f"{args.threads} threads, batch {args.batch_size}, Ember layout {args.layout}, "
        f"{args.repeat} alternating rounds, target {args.target}"
    )
    header = (
        f"{'model':24s} {'ember ms':>9s} {'ORT ms':>9s} {'ember/ORT':>9s} "
        f"{'compile cold s':>14s} {'warm s':>7s} {'max |diff|':>10s}"
    )
    print(header)
    with tempfile.TemporaryDirectory(prefix="ember-compare-") as tmp:
        for model in args.models:
            r = compare(model, args, Path(tmp))
            print(
                f"{r.model:24s} {r.ember_ms:9.2f} {r.ort_ms:9.2f} {r.ember_ms / r.ort_ms:9.2f} "
                f"{r.cold_s:14.1f} {r.warm_s:7.1f} {r.max_diff:10.2e}",
                flush=True,
            )


if __name__ == "__main__":
    main()
