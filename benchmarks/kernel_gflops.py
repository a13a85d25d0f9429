"""GFLOP/s of the default schedules on two reference kernels, for the performance issue.

    python benchmarks/kernel_gflops.py [--threads 2] [--repeat 50]

Kernels: ResNet-50's 3x3 conv 56x56x64 -> 64 (NHWC, batch 1, padding 1, with a bias +
ReLU epilogue) and a 512x512x512 dense. Each is built through the normal path
(graph -> fuse -> group_to_dag -> default_schedule -> lower -> C) and timed by calling
the kernel from Python (the call overhead is microseconds; the kernels take
milliseconds). The same graph, exported with ember.testing.to_onnx (NCHW inside for
the conv, as ONNX requires), runs in ONNX Runtime with the same thread count, timed
alternately with Ember's kernel in the same loop. Prints the medians, GFLOP/s (2 x
multiply-accumulates / time), the share of the machine's fp32 FMA peak given by --peak
(default 530 GFLOP/s, the 2-thread figure of the performance issue) and the
Ember / ONNX Runtime time ratio.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--peak", type=float, default=530.0, help="fp32 peak in GFLOP/s")
    parser.add_argument("--dump", action="store_true", help="print each kernel's C source")
    return parser.parse_args()


def main() -> None:
    args = _parse()
    # OpenMP reads this when the first kernel library loads: set it before any build.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    import numpy as np

    from ember.graph import GraphBuilder
    from ember.graph.ir import Graph, Params
    from ember.graph.ops.attrs import ConvAttrs
    from ember.graph.passes.fuse import fuse
    from ember.kernel import build_groups
    from ember.target import Target

    rng = np.random.default_rng(0)

    def conv() -> tuple[Graph, Params, int]:
        b = GraphBuilder("conv3x3")
        x = b.input("x", (1, 56, 56, 64))
        w = b.param("w", rng.standard_normal((3, 3, 64, 64)).astype("float32"))
        bias = b.param("b", rng.standard_normal(64).astype("float32"))
        attrs = ConvAttrs((1, 1), (1, 1, 1, 1), (1, 1), 1, "NHWC", "HWIO")
        y = b.add("relu", [b.add("add", [b.add("conv", [x, w], attrs), bias])])
        return (*b.build([y]), 2 * 56 * 56 * 64 * 64 * 9)

    def dense() -> tuple[Graph, Params, int]:
        b = GraphBuilder("dense512")
        x = b.input("x", (512, 512))
        w = b.param("w", rng.standard_normal((512, 512)).astype("float32"))
        return (*b.build([b.add("dense", [x, w])]), 2 * 512**3)

    target = Target("llvm")
    print(f"target {target} ({target.fp32_lanes} fp32 lanes), {args.threads} threads")
    for name, (graph, params, flops) in (
        ("conv3x3 56x56x64->64 NHWC", conv()),
        ("dense 512^3", dense()),
    ):
        (group,) = fuse(graph, params).groups
        (compiled,) = build_groups([group], target)
        if args.dump:
            print(compiled.kernel.source)
        data = graph.inputs[0]
        values = {**params, data.name: rng.standard_normal(data.shape).astype("float32")}
        arrays = [np.ascontiguousarray(values[v.name]) for v in compiled.inputs]
        outputs = [np.empty(v.shape, v.dtype) for v in compiled.outputs]
        session = _onnxruntime_session(graph, params, args.threads)
        feed = {data.name: values[data.name]}
        for _ in range(3):
            compiled.kernel(*arrays, *outputs)
            session.run(None, feed)
        ember_times, ort_times = [], []
        for _ in range(args.repeat):
            start = time.perf_counter()
            compiled.kernel(*arrays, *outputs)
            ember_times.append(time.perf_counter() - start)
            start = time.perf_counter()
            session.run(None, feed)
            ort_times.append(time.perf_counter() - start)
        median = statistics.median(ember_times)
        ort_median = statistics.median(ort_times)
        gflops = flops / median / 1e9
        print(
            f"{name:28s} ember {median * 1e3:7.3f} ms {gflops:6.1f} GFLOP/s "
            f"({100 * gflops / args.peak:4.1f}% of {args.peak:.0f})   "
            f"onnxruntime {ort_median * 1e3:7.3f} ms {flops / ort_median / 1e9:6.1f} GFLOP/s   "
            f"ember/ort {median / ort_median:5.2f}"
        )
    sys.stdout.flush()


def _onnxruntime_session(graph: object, params: object, threads: int) -> object:
    """ONNX Runtime on the same graph, all graph optimisations on (its best)."""
    import onnxruntime

    from ember.testing import to_onnx

    options = onnxruntime.SessionOptions()
    options.intra_op_num_threads = threads
    options.inter_op_num_threads = 1
    model = to_onnx(graph, params)  # type: ignore[arg-type]
    return onnxruntime.InferenceSession(
        model.SerializeToString(), sess_options=options, providers=["CPUExecutionProvider"]
    )


if __name__ == "__main__":
    main()
