"""Small search tasks of every DAG kind the sketch rules tell apart, with fixed hardware
parameters (AVX-512-like, two cores) so the sketches do not depend on the test machine,
and a helper that compiles a state and compares it with the DAG's NumPy value."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ember import te
from ember.autoschedule import HardwareParams, SearchTask
from ember.backend import build_kernel
from ember.schedule import State, lower
from ember.te.evaluate import evaluate_dag

HARDWARE = HardwareParams(
    num_cores=2,
    vector_bytes=64,
    vector_registers=32,
    cache_line_bytes=64,
    l1_cache_bytes=48 * 1024,
    l2_cache_bytes=1024 * 1024,
    l3_cache_bytes=0,
)


def _pad(data: te.Tensor, pad: int) -> te.Tensor:
    _, h, w, c = data.shape

    def padded(n: te.Expr, y: te.Expr, x: te.Expr, ch: te.Expr) -> te.Expr:
        inside = te.logical_and(
            te.logical_and(y >= pad, y < h + pad), te.logical_and(x >= pad, x < w + pad)
        )
        return te.select(inside, data[n, y - pad, x - pad, ch], 0.0)

    return te.compute((1, h + 2 * pad, w + 2 * pad, c), padded, name="pad_temp", tag="pad")


def conv2d(
    size: int = 8,
    channels: int = 16,
    filters: int = 16,
    kernel: int = 3,
    stride: int = 1,
    block: int = 0,
) -> te.ComputeDAG:
    """NHWC conv with padding (kernel // 2), bias and ReLU epilogue (none when strided:
    then the conv is the output); with `block`, the weight packed as conv_pack reads it,
    `[filters / block, kernel, kernel, channels, block]`."""
    data = te.placeholder((1, size, size, channels), name="data")
    if block:
        packed = te.placeholder((filters // block, kernel, kernel, channels, block), name="weight")

        def read_weight(y: te.Expr, x: te.Expr, c: te.Expr, f: te.Expr) -> te.Expr:
            return packed[f // block, y, x, c, f % block]
    else:
        weight = te.placeholder((kernel, kernel, channels, filters), name="weight")

        def read_weight(y: te.Expr, x: te.Expr, c: te.Expr, f: te.Expr) -> te.Expr:
            return weight[y, x, c, f]

    pad = kernel // 2
    source = _pad(data, pad) if pad else data
    out = (size + 2 * pad - kernel) // stride + 1
    ry, rx = te.reduce_axis(kernel, "ry"), te.reduce_axis(kernel, "rx")
    rc = te.reduce_axis(channels, "rc")
    conv = te.compute(
        (1, out, out, filters),
        lambda n, y, x, f: te.reduce_sum(
            source[n, y * stride + ry, x * stride + rx, rc] * read_weight(ry, rx, rc, f),
            [ry, rx, rc],
        ),
        name="conv2d_nhwc",
    )
    if stride > 1:
        return te.ComputeDAG([conv])
    bias = te.placeholder((filters,), name="bias")
    add = te.compute(conv.shape, lambda n, y, x, f: conv[n, y, x, f] + bias[f], name="T_add")
    relu = te.compute(add.shape, lambda n, y, x, f: te.maximum(add[n, y, x, f], 0.0), name="relu")
    return te.ComputeDAG([relu])


def depthwise(size: int = 8, channels: int = 32) -> te.ComputeDAG:
    data = te.placeholder((1, size, size, channels), name="data")
    weight = te.placeholder((3, 3, channels), name="weight")
    pad = _pad(data, 1)
    ry, rx = te.reduce_axis(3, "ry"), te.reduce_axis(3, "rx")
    out = te.compute(
        (1, size, size, channels),
        lambda n, y, x, c: te.reduce_sum(pad[n, y + ry, x + rx, c] * weight[ry, rx, c], [ry, rx]),
        name="depthwise_conv2d",
    )
    return te.ComputeDAG([out])


def dense(m: int = 8, n: int = 64, k: int = 32) -> te.ComputeDAG:
    data = te.placeholder((m, k), name="data")
    weight = te.placeholder((n, k), name="weight")
    bias = te.placeholder((n,), name="bias")
    rk = te.reduce_axis(k, "k")
    product = te.compute(
        (m, n), lambda i, j: te.reduce_sum(data[i, rk] * weight[j, rk], rk), name="T_dense"
    )
    out = te.compute((m, n), lambda i, j: product[i, j] + bias[j], name="T_add")
    return te.ComputeDAG([out])


def batch_matmul(batch: int = 2, m: int = 8, n: int = 32, k: int = 16) -> te.ComputeDAG:
    a = te.placeholder((batch, m, k), name="a")
    b = te.placeholder((batch, k, n), name="b")
    rk = te.reduce_axis(k, "k")
    out = te.compute(
        (batch, m, n),
        lambda bb, i, j: te.reduce_sum(a[bb, i, rk] * b[bb, rk, j], rk),
        name="T_batch_matmul_NN",
    )
    return te.ComputeDAG([out])


def softmax(rows: int = 1, cols: int = 256) -> te.ComputeDAG:
    data = te.placeholder((rows, cols), name="data")
    k1, k2 = te.reduce_axis(cols, "k1"), te.reduce_axis(cols, "k2")
    top = te.compute((rows,), lambda i: te.reduce_max(data[i, k1], k1), name="T_max")
    exp = te.compute((rows, cols), lambda i, j: te.call("exp", data[i, j] - top[i]), name="T_exp")
    total = te.compute((rows,), lambda i: te.reduce_sum(exp[i, k2], k2), name="T_sum")
    out = te.compute((rows, cols), lambda i, j: exp[i, j] / total[i], name="T_softmax")
    return te.ComputeDAG([out])


def max_pool(size: int = 8, channels: int = 32) -> te.ComputeDAG:
    """3x3 max pool, stride 2, padding 1 (NHWC)."""
    data = te.placeholder((1, size, size, channels), name="data")

    def padded(n: te.Expr, y: te.Expr, x: te.Expr, c: te.Expr) -> te.Expr:
        inside = te.logical_and(y >= 1, x >= 1)
        return te.select(inside, data[n, y - 1, x - 1, c], -3.0e38)

    pad = te.compute((1, size + 1, size + 1, channels), padded, name="pad_temp", tag="pad")
    ry, rx = te.reduce_axis(3, "rv0"), te.reduce_axis(3, "rv1")
    out = size // 2
    pool = te.compute(
        (1, out, out, channels),
        lambda n, y, x, c: te.reduce_max(pad[n, y * 2 + ry, x * 2 + rx, c], [ry, rx]),
        name="pool_max",
    )
    return te.ComputeDAG([pool])


DAGS: dict[str, Callable[[], te.ComputeDAG]] = {
    "conv2d_3x3": conv2d,
    "conv2d_1x1": lambda: conv2d(kernel=1, channels=32, filters=32),
    "conv2d_strided": lambda: conv2d(size=9, stride=2),
    "conv2d_packed": lambda: conv2d(channels=8, filters=32, block=16),
    "depthwise": depthwise,
    "dense": dense,
    "batch_matmul": batch_matmul,
    "softmax": softmax,
    "max_pool": max_pool,
}


def task_of(name: str) -> SearchTask:
    return SearchTask.create(DAGS[name](), "llvm", HARDWARE)


def random_inputs(dag: te.ComputeDAG, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    return [rng.uniform(-1, 1, t.shape).astype(t.dtype) for t in dag.inputs]


def check_compiled(state: State) -> None:
    """Compile `state` and compare every output with the DAG's NumPy value."""
    dag = state.dag
    inputs = random_inputs(dag)
    expected = evaluate_dag(dag, inputs)
    kernel = build_kernel(lower(state), "llvm")
    outputs = [np.full(t.shape, np.nan, t.dtype) for t in dag.outputs]
    kernel(*inputs, *outputs)
    for got, want in zip(outputs, expected, strict=True):
        np.testing.assert_allclose(got, want, rtol=1e-4, atol=1e-5, err_msg=kernel.source)
