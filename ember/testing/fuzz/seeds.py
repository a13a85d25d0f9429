"""The fuzzer's seed models: small ONNX models that each import, interpret like ONNX
Runtime and compile like the interpreter today."""

from __future__ import annotations

import numpy as np
import onnx
import onnx.parser
from onnx import numpy_helper

OPSET = 17


def _weights(*shape: int, seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype(np.float32)


def _ints(*values: int, dtype: str = "int64") -> np.ndarray:
    return np.asarray(values, dtype)


def _scalar(value: float, dtype: str = "float32") -> np.ndarray:
    return np.asarray(value, dtype)


_CONV = {"w": _weights(4, 3, 3, 3), "b": _weights(4, seed=1)}
# Name -> (the graph in ONNX's text syntax, its initializers). Outputs are written
# `float y`; their types come from ONNX's shape inference.
SEED_GRAPHS: dict[str, tuple[str, dict[str, np.ndarray]]] = {
    "conv_relu": (
        "(float[1,3,8,8] x) => (float y) { c = Conv <pads = [1,1,1,1]> (x, w, b)  y = Relu (c) }",
        _CONV,
    ),
    "conv_pool_gemm": (
        "(float[1,3,8,8] x) => (float y) { c = Conv <strides = [2,2]> (x, w, b)"
        "  p = GlobalAveragePool (c)  f = Flatten (p)  y = Gemm <transB = 1> (f, g, gb) }",
        {**_CONV, "g": _weights(5, 4, seed=2), "gb": _weights(5, seed=3)},
    ),
    "matmul": ("(float[2,4] x) => (float y) { y = MatMul (x, w) }", {"w": _weights(4, 3)}),
    "gemm": (
        "(float[2,4] x) => (float y) { y = Gemm <alpha = 0.5, beta = 2.0, transB = 1> (x, w, c) }",
        {"w": _weights(3, 4), "c": _weights(3, seed=1)},
    ),
    "broadcast": (
        "(float[2,3,4] x, float[3,1] z) => (float y) { s = Add (x, z)  y = Mul (s, k) }",
        {"k": _weights(4)},
    ),
    "concat": (
        "(float[1,2,4] x, float[1,3,4] z) => (float y) { y = Concat <axis = 1> (x, z) }",
        {},
    ),
    "reshape_transpose": (
        "(float[2,3,4] x) => (float y) { r = Reshape (x, s)  y = Transpose <perm = [1,0]> (r) }",
        {"s": _ints(4, 6)},
    ),
    "reduce": (
        "(float[2,3,4] x) => (float y) { m = ReduceMean <axes = [1], keepdims = 1> (x)"
        "  y = ReduceSum <keepdims = 0> (m, a) }",
        {"a": _ints(-1)},
    ),
    "softmax": ("(float[2,5] x) => (float y) { y = Softmax <axis = -1> (x) }", {}),
    "pools": (
        "(float[1,2,6,6] x) => (float m, float a) {"
        "  m = MaxPool <kernel_shape = [2,2], strides = [2,2]> (x)"
        "  a = AveragePool <kernel_shape = [3,3], pads = [1,1,1,1]> (x) }",
        {},
    ),
    "gather": (
        "(float[5,3] x) => (float y) { y = Gather <axis = 0> (x, i) }",
        {"i": np.asarray([[0, 4], [2, 1]], np.int64)},
    ),
    "resize": (
        '(float[1,1,4,4] x) => (float y) { y = Resize <mode = "linear"> (x, , s) }',
        {"s": _ints(1, 1, 2, 2, dtype="float32")},
    ),
    "lrn": ("(float[1,4,5,5] x) => (float y) { y = LRN <size = 3> (x) }", {}),
    "slice": (
        "(float[4,6] x) => (float y) { y = Slice (x, st, en, ax, sp) }",
        {"st": _ints(1, 0), "en": _ints(4, 6), "ax": _ints(0, 1), "sp": _ints(1, 2)},
    ),
    "pad": (
        '(float[1,2,3,3] x) => (float y) { y = Pad <mode = "constant"> (x, p, v) }',
        {"p": _ints(0, 0, 1, 2, 0, 0, 2, 1), "v": _scalar(0.5)},
    ),
    "where_bool": (
        "(float[2,3] x, float[2,3] z, int64[2,3] i, int64[2,3] j) => (float y, bool c) {"
        "  g = Greater (x, z)  e = Equal (i, j)  c = And (g, e)  y = Where (c, x, z) }",
        {},
    ),
    "cast": (
        "(float[2,3] x) => (float y, bool b) { m = Mul (x, k)  i = Cast <to = 6> (m)"
        "  y = Cast <to = 1> (i)  b = Cast <to = 9> (x) }",
        {"k": _scalar(3.0)},
    ),
    "elementwise_chain": (
        "(float[2,4] x) => (float y) { a = Sigmoid (x)  b = Abs (x)  c = Sqrt (b)"
        "  d = Sub (a, c)  e = Tanh (d)  f = Neg (e)  g = Clip (f, lo, hi)"
        "  h = LeakyRelu <alpha = 0.2> (g)  y = Exp (h) }",
        {"lo": _scalar(-0.5), "hi": _scalar(0.7)},
    ),
    "qdq_conv": (
        "(float[1,3,8,8] x) => (float y) { q = QuantizeLinear (x, s, z)"
        "  d = DequantizeLinear (q, s, z)  dw = DequantizeLinear (qw, ws, z)"
        "  c = Conv (d, dw)  qc = QuantizeLinear (c, so, z)  y = DequantizeLinear (qc, so, z) }",
        {
            "s": _scalar(0.05),
            # Not a multiple of s * ws: sums of products would often round half-way.
            "so": _scalar(0.0371),
            "z": _scalar(0, "int8"),
            "ws": _scalar(0.02),
            "qw": np.random.default_rng(4).integers(-100, 100, (2, 3, 3, 3)).astype(np.int8),
        },
    ),
    "batchnorm": (
        "(float[1,3,8,8] x) => (float y) {"
        "  y = BatchNormalization <epsilon = 0.001> (x, sc, bi, me, va) }",
        {
            "sc": _weights(3),
            "bi": _weights(3, seed=1),
            "me": _weights(3, seed=2),
            "va": np.abs(_weights(3, seed=3)) + 0.5,
        },
    ),
    "split": (
        "(float[2,6] x) => (float a, float b) { a, b = Split <axis = 1> (x, s) }",
        {"s": _ints(2, 4)},
    ),
    "expand": ("(float[3,1] x) => (float y) { y = Expand (x, s) }", {"s": _ints(2, 3, 4)}),
    "topk": (
        "(float[3,6] x) => (float v, int64 i) { v, i = TopK <axis = 1> (x, k) }",
        {"k": _ints(2)},
    ),
}
_SEED_CACHE: dict[str, bytes] = {}


def build_seed(name: str) -> onnx.ModelProto:
    """Seed model `name` at opset OPSET, its outputs typed by ONNX's shape inference."""
    text, initializers = SEED_GRAPHS[name]
    model = onnx.parser.parse_model(f'<ir_version: 8, opset_import: ["" : {OPSET}]>\n{name} {text}')
    for output in model.graph.output:
        output.type.CopyFrom(onnx.TypeProto())
    model.graph.initializer.extend(numpy_helper.from_array(a, n) for n, a in initializers.items())
    return onnx.shape_inference.infer_shapes(model, strict_mode=True)


def seed_model(name: str) -> onnx.ModelProto:
    """A fresh copy of seed model `name` (built once per process)."""
    if name not in _SEED_CACHE:
        _SEED_CACHE[name] = build_seed(name).SerializeToString()
    return onnx.load_from_string(_SEED_CACHE[name])
