"""GFLOP/s of the default schedules on single kernels, side by side with ONNX Runtime.

    python benchmarks/kernel_gflops.py [--threads 2] [--repeat 50] [--suite reference]

Suites: `reference` (ResNet-50's 3x3 conv 56x56x64 -> 64 and a 512x512x512 dense),
`resnet50` (every distinct conv of ResNet-50 v1.5 at batch 1, NHWC, each with its
bias + ReLU epilogue), `mobilenet` (MobileNetV2's depthwise 3x3 convs, strided and
not, with bias + ReLU6, and a few of its 1x1 convs), `pool` (max and average
pooling), `dense` (classifier layers, BERT-base layers, attention's batch matmuls
of two inputs) or `all`. Each kernel is built through the normal path (graph ->
pack_weights -> fuse -> group_to_dag -> default_schedule -> lower -> C) and timed by
calling it from Python (the call overhead is microseconds). The same graph, exported with
ember.testing.to_onnx (NCHW inside for convs, as ONNX requires), runs in ONNX Runtime
with the same thread count, timed alternately with Ember's kernel in blocks of BLOCK
calls (the first of each block untimed: an idle thread pool spins for a while).
Prints the medians, GFLOP/s (2 x multiply-accumulates / time), the share of the
machine's fp32 FMA peak given by --peak (default 530 GFLOP/s, the 2-thread figure of
the performance issue; use about 265 with --threads 1) and the Ember / ONNX Runtime
time ratio; for a suite, also the totals over its kernels.
"""

from __future__ import annotations

import argparse
import os
import statistics
import sys
import time
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

# One convolution: input H x W x C -> K channels, an R x R kernel, stride, padding,
# groups (C for depthwise), and its epilogue ("relu", "relu6" or "").
ConvShape = tuple[int, int, int, int, int, int, int, int, str]

RESNET50_CONVS: tuple[ConvShape, ...] = (
    (224, 224, 3, 64, 7, 2, 3, 1, "relu"),
    (56, 56, 64, 64, 1, 1, 0, 1, "relu"),
    (56, 56, 64, 64, 3, 1, 1, 1, "relu"),
    (56, 56, 64, 256, 1, 1, 0, 1, ""),
    (56, 56, 256, 64, 1, 1, 0, 1, "relu"),
    (56, 56, 256, 128, 1, 1, 0, 1, "relu"),
    (56, 56, 128, 128, 3, 2, 1, 1, "relu"),
    (28, 28, 128, 512, 1, 1, 0, 1, ""),
    (56, 56, 256, 512, 1, 2, 0, 1, ""),
    (28, 28, 512, 128, 1, 1, 0, 1, "relu"),
    (28, 28, 128, 128, 3, 1, 1, 1, "relu"),
    (28, 28, 512, 256, 1, 1, 0, 1, "relu"),
    (28, 28, 256, 256, 3, 2, 1, 1, "relu"),
    (14, 14, 256, 1024, 1, 1, 0, 1, ""),
    (28, 28, 512, 1024, 1, 2, 0, 1, ""),
    (14, 14, 1024, 256, 1, 1, 0, 1, "relu"),
    (14, 14, 256, 256, 3, 1, 1, 1, "relu"),
    (14, 14, 1024, 512, 1, 1, 0, 1, "relu"),
    (14, 14, 512, 512, 3, 2, 1, 1, "relu"),
    (7, 7, 512, 2048, 1, 1, 0, 1, ""),
    (14, 14, 1024, 2048, 1, 2, 0, 1, ""),
    (7, 7, 2048, 512, 1, 1, 0, 1, "relu"),
    (7, 7, 512, 512, 3, 1, 1, 1, "relu"),
)
MOBILENET_CONVS: tuple[ConvShape, ...] = (
    (112, 112, 32, 32, 3, 1, 1, 32, "relu6"),
    (112, 112, 96, 96, 3, 2, 1, 96, "relu6"),
    (56, 56, 144, 144, 3, 1, 1, 144, "relu6"),
    (28, 28, 192, 192, 3, 1, 1, 192, "relu6"),
    (14, 14, 384, 384, 3, 1, 1, 384, "relu6"),
    (14, 14, 576, 576, 3, 2, 1, 576, "relu6"),
    (7, 7, 960, 960, 3, 1, 1, 960, "relu6"),
    (112, 112, 32, 16, 1, 1, 0, 1, ""),
    (56, 56, 24, 144, 1, 1, 0, 1, "relu6"),
    (28, 28, 192, 32, 1, 1, 0, 1, ""),
    (7, 7, 960, 160, 1, 1, 0, 1, ""),
)
# Matrix products: name, batch, M, K, N, constant weight (a dense layer + bias) or not.
PRODUCTS: tuple[tuple[str, int, int, int, int, bool], ...] = (
    ("resnet50 fc", 1, 1, 2048, 1000, True),
    ("mobilenet_v2 fc", 1, 1, 1280, 1000, True),
    ("dense batch 16", 1, 16, 2048, 1000, True),
    ("bert qkv", 1, 128, 768, 2304, True),
    ("bert ffn", 1, 128, 3072, 768, True),
    ("vit-b/16 qkv", 1, 197, 768, 2304, True),
    ("vit-b/16 mlp in", 1, 197, 768, 3072, True),
    ("vit-b/16 mlp out", 1, 197, 3072, 768, True),
    ("matmul", 1, 512, 512, 512, False),
    ("attention q.kT", 12, 128, 64, 128, False),
    ("attention p.v", 12, 128, 128, 64, False),
)
# Pooling: input H x W x C, window, stride, padding, "max" or "avg".
POOLS: tuple[tuple[int, int, int, int, int, int, str], ...] = (
    (112, 112, 64, 3, 2, 1, "max"),
    (56, 56, 256, 2, 2, 0, "avg"),
    (7, 7, 2048, 7, 1, 0, "avg"),
)


# Calls timed in a row before switching between Ember and ONNX Runtime.
BLOCK = 10


@dataclass(frozen=True, slots=True)
class Workload:
    name: str
    graph: Any
    params: Any
    flops: int


def _parse() -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--threads", type=int, default=2)
    parser.add_argument("--repeat", type=int, default=50)
    parser.add_argument("--peak", type=float, default=530.0, help="fp32 peak in GFLOP/s")
    parser.add_argument(
        "--suite",
        default="reference",
        choices=("reference", "resnet50", "mobilenet", "pool", "dense", "all"),
    )
    parser.add_argument("--only", default="", help="run only kernels whose name contains this")
    parser.add_argument("--dump", action="store_true", help="print each kernel's C source")
    return parser.parse_args()


def main() -> None:
    args = _parse()
    # OpenMP reads this when the first kernel library loads: set it before any build.
    os.environ["OMP_NUM_THREADS"] = str(args.threads)
    from ember.device import device_model
    from ember.target import Target

    target = Target("llvm")
    print(f"target {target} ({device_model(target).fp32_lanes} fp32 lanes), {args.threads} threads")
    total_ember = total_ort = 0.0
    total_flops = 0
    workloads = [w for w in _suite(args.suite) if args.only in w.name]
    for workload in workloads:
        ember_time, ort_time = _measure(workload, target, args)
        total_ember, total_ort = total_ember + ember_time, total_ort + ort_time
        total_flops += workload.flops
        _report(workload.name, workload.flops, ember_time, ort_time, args.peak)
    if len(workloads) > 1:
        _report("total", total_flops, total_ember, total_ort, args.peak)
    sys.stdout.flush()


def _report(name: str, flops: int, ember: float, ort: float, peak: float) -> None:
    gflops = flops / ember / 1e9
    print(
        f"{name:34s} ember {ember * 1e3:7.3f} ms {gflops:6.1f} GFLOP/s "
        f"({100 * gflops / peak:4.1f}% of {peak:.0f})   "
        f"onnxruntime {ort * 1e3:7.3f} ms {flops / ort / 1e9:6.1f} GFLOP/s   "
        f"ember/ort {ember / ort:5.2f}",
        flush=True,
    )


def _measure(workload: Workload, target: Any, args: argparse.Namespace) -> tuple[float, float]:
    """Median seconds of Ember's kernels (usually one; a padded dense layer also has a
    slice) and of ONNX Runtime, timed alternately."""
    import numpy as np

    from ember.graph.passes.fuse import fuse
    from ember.graph.passes.pack_weights import pack_weights
    from ember.kernel import build_groups

    rng = np.random.default_rng(0)
    graph, params = workload.graph, workload.params
    # As ember.build does: constant dense/matmul weights packed for the target.
    packed, packed_params = pack_weights(graph, params, target)
    feed = {v.name: rng.standard_normal(v.shape).astype("float32") for v in graph.inputs}
    values = {**packed_params, **feed}
    calls = []
    for compiled in build_groups(fuse(packed, packed_params).groups, target):
        if args.dump:
            print(compiled.kernel.source)
        values.update({v.name: np.empty(v.shape, v.dtype) for v in compiled.outputs})
        arrays = [np.ascontiguousarray(values[v.name]) for v in compiled.inputs]
        outputs = [values[v.name] for v in compiled.outputs]
        calls.append((compiled.kernel, (*arrays, *outputs)))

    def run() -> None:
        for kernel, arguments in calls:
            kernel(*arguments)

    session = _onnxruntime_session(graph, params, args.threads)
    for _ in range(3):
        run()
        session.run(None, feed)
    ember_times: list[float] = []
    ort_times: list[float] = []
    # Alternate in blocks, the first call of each block untimed: an idle OpenMP or
    # ONNX Runtime thread pool spins for a while after its last call, and would
    # otherwise steal a core from the other's next call.
    while len(ember_times) < args.repeat:
        ember_times += _timed(run, BLOCK)
        ort_times += _timed(lambda: session.run(None, feed), BLOCK)
    return statistics.median(ember_times), statistics.median(ort_times)


def _timed(call: Callable[[], object], count: int) -> list[float]:
    """Seconds of `count` calls of `call`, after one untimed call."""
    call()
    times = []
    for _ in range(count):
        start = time.perf_counter()
        call()
        times.append(time.perf_counter() - start)
    return times


def _suite(name: str) -> list[Workload]:
    suites: dict[str, Callable[[], list[Workload]]] = {
        "reference": lambda: [_conv((56, 56, 64, 64, 3, 1, 1, 1, "relu"), bias=True), _dense()],
        "resnet50": lambda: [_conv(shape) for shape in RESNET50_CONVS],
        "mobilenet": lambda: [_conv(shape) for shape in MOBILENET_CONVS],
        "pool": lambda: [_pool(*shape) for shape in POOLS],
        "dense": lambda: [_product(*shape) for shape in PRODUCTS],
    }
    if name == "all":
        keys = ("reference", "resnet50", "mobilenet", "pool", "dense")
        return [w for key in keys for w in suites[key]()]
    return suites[name]()


def _conv(shape: ConvShape, bias: bool = True) -> Workload:
    import numpy as np

    from ember.graph import GraphBuilder
    from ember.graph.ops.attrs import ConvAttrs

    h, w, c, k, r, stride, pad, groups, epilogue = shape
    rng = np.random.default_rng(0)
    b = GraphBuilder("conv")
    x = b.input("x", (1, h, w, c))
    weight = rng.standard_normal((r, r, c // groups, k)).astype("float32")
    attrs = ConvAttrs((stride, stride), (pad,) * 4, (1, 1), groups, "NHWC", "HWIO")
    y = b.add("conv", [x, b.param("w", weight)], attrs)
    if bias:
        y = b.add("add", [y, b.param("b", rng.standard_normal(k).astype("float32"))])
    if epilogue == "relu":
        y = b.add("relu", [y])
    elif epilogue == "relu6":
        y = b.add("clip", [y], _clip_attrs(0.0, 6.0))
    out_h, out_w = (h + 2 * pad - r) // stride + 1, (w + 2 * pad - r) // stride + 1
    flops = 2 * out_h * out_w * k * (c // groups) * r * r
    kind = "dw" if groups > 1 else "conv"
    name = f"{kind}{r}x{r}/{stride} {h}x{w}x{c}->{k}"
    return Workload(name, *b.build([y]), flops)


def _clip_attrs(low: float, high: float) -> Any:
    from ember.graph.ops.attrs import ClipAttrs

    return ClipAttrs(low, high)


def _dense() -> Workload:
    import numpy as np

    from ember.graph import GraphBuilder

    rng = np.random.default_rng(0)
    b = GraphBuilder("dense512")
    x = b.input("x", (512, 512))
    w = b.param("w", rng.standard_normal((512, 512)).astype("float32"))
    return Workload("dense 512^3", *b.build([b.add("dense", [x, w])]), 2 * 512**3)


def _product(name: str, batch: int, m: int, k: int, n: int, constant: bool) -> Workload:
    """A dense layer (constant weight, + bias) or a (batch) matmul of two inputs."""
    import numpy as np

    from ember.graph import GraphBuilder

    rng = np.random.default_rng(0)
    b = GraphBuilder("product")
    lead = (batch,) if batch > 1 else ()
    x = b.input("x", (*lead, m, k))
    if constant:
        weight = b.param("w", rng.standard_normal((n, k)).astype("float32"))
        bias = b.param("b", rng.standard_normal(n).astype("float32"))
        y = b.add("add", [b.add("dense", [x, weight]), bias])
    else:
        y = b.add("matmul", [x, b.input("y", (*lead, k, n))])
    return Workload(f"{name} {batch}x{m}x{k}x{n}", *b.build([y]), 2 * batch * m * k * n)


def _pool(h: int, w: int, c: int, window: int, stride: int, pad: int, kind: str) -> Workload:
    from ember.graph import GraphBuilder
    from ember.graph.ops.attrs import PoolAttrs

    b = GraphBuilder("pool")
    x = b.input("x", (1, h, w, c))
    attrs = PoolAttrs((window, window), (stride, stride), (pad,) * 4, (1, 1), layout="NHWC")
    y = b.add(f"{kind}_pool", [x], attrs)
    out_h = (h + 2 * pad - window) // stride + 1
    out_w = (w + 2 * pad - window) // stride + 1
    # One "flop" per window element read, so pools read as element rates.
    flops = out_h * out_w * c * window * window
    return Workload(f"{kind}pool{window}x{window}/{stride} {h}x{w}x{c}", *b.build([y]), flops)


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
