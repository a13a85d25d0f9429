"""TFLite converters for arithmetic: binary operators with their fused activations,
activations and other unary functions, reductions.
"""

from __future__ import annotations

from ember.frontend.tflite.registry import TFLiteNode, converter, unsupported
from ember.graph.ir import Value
from ember.graph.ops.attrs import (
    AlphaAttrs,
    ArgReduceAttrs,
    CastAttrs,
    ClipAttrs,
    GeluAttrs,
    ReduceAttrs,
)

_BINARY = {
    "ADD": "add", "SUB": "subtract", "MUL": "multiply", "DIV": "divide",
    "MAXIMUM": "maximum", "MINIMUM": "minimum", "POW": "power", "FLOOR_MOD": "floor_mod",
}  # fmt: skip


@converter(*_BINARY)
def convert_binary(node: TFLiteNode) -> list[Value]:
    out = node.add(_BINARY[node.op], [node.input(0), node.input(1)])
    return [node.activation(out)]


@converter("SQUARED_DIFFERENCE")
def convert_squared_difference(node: TFLiteNode) -> list[Value]:
    difference = node.add("subtract", [node.input(0), node.input(1)], suffix="difference")
    return [node.add("multiply", [difference, difference])]


_COMPARE = {"LESS": "less", "LESS_EQUAL": "less_equal", "GREATER": "greater",
            "GREATER_EQUAL": "greater_equal", "EQUAL": "equal"}  # fmt: skip


@converter(*_COMPARE)
def convert_compare(node: TFLiteNode) -> list[Value]:
    return [node.add(_COMPARE[node.op], [node.input(0), node.input(1)])]


@converter("NOT_EQUAL")
def convert_not_equal(node: TFLiteNode) -> list[Value]:
    same = node.add("equal", [node.input(0), node.input(1)], suffix="equal")
    return [node.add("logical_not", [same])]


@converter("SELECT", "SELECT_V2")
def convert_select(node: TFLiteNode) -> list[Value]:
    return [node.add("where", [node.input(0), node.input(1), node.input(2)])]


_UNARY = {
    "LOGISTIC": "sigmoid", "TANH": "tanh", "RELU": "relu", "HARD_SWISH": "hard_swish",
    "EXP": "exp", "LOG": "log", "SQRT": "sqrt", "NEG": "negative", "ABS": "abs",
    "FLOOR": "floor", "CEIL": "ceil", "SIN": "sin", "COS": "cos", "ROUND": "round",
    "SIGN": "sign", "LOGICAL_NOT": "logical_not",
}  # fmt: skip


@converter(*_UNARY)
def convert_unary(node: TFLiteNode) -> list[Value]:
    return [node.add(_UNARY[node.op], [node.input(0)])]


@converter("RELU6", "RELU_N1_TO_1", "RELU_0_TO_1")
def convert_clipped_relu(node: TFLiteNode) -> list[Value]:
    low, high = {"RELU6": (0.0, 6.0), "RELU_N1_TO_1": (-1.0, 1.0), "RELU_0_TO_1": (0.0, 1.0)}[
        node.op
    ]
    return [node.add("clip", [node.input(0)], ClipAttrs(low, high))]


@converter("RSQRT")
def convert_rsqrt(node: TFLiteNode) -> list[Value]:
    root = node.add("sqrt", [node.input(0)], suffix="sqrt")
    return [node.add("reciprocal", [root])]


@converter("SQUARE")
def convert_square(node: TFLiteNode) -> list[Value]:
    data = node.input(0)
    return [node.add("multiply", [data, data])]


@converter("LEAKY_RELU")
def convert_leaky_relu(node: TFLiteNode) -> list[Value]:
    alpha = float(node.option("Alpha", 0.2))  # type: ignore[arg-type]
    return [node.add("leaky_relu", [node.input(0)], AlphaAttrs(alpha))]


@converter("PRELU")
def convert_prelu(node: TFLiteNode) -> list[Value]:
    return [node.add("prelu", [node.input(0), node.input(1)])]


@converter("GELU")
def convert_gelu(node: TFLiteNode) -> list[Value]:
    approximate = "tanh" if node.option("Approximate", False) else "none"
    return [node.add("gelu", [node.input(0)], GeluAttrs(approximate))]


_REDUCE = {"MEAN": "reduce_mean", "SUM": "reduce_sum", "REDUCE_MAX": "reduce_max",
           "REDUCE_MIN": "reduce_min", "REDUCE_PROD": "reduce_prod"}  # fmt: skip


@converter(*_REDUCE)
def convert_reduce(node: TFLiteNode) -> list[Value]:
    """inputs (data, axes); keep_dims from the options."""
    data = node.input(0)
    rank = data.type.ndim
    axes = tuple(sorted({int(a) % rank for a in node.constant(1, "axes").reshape(-1)}))
    keep = bool(node.option("KeepDims", False))
    if not axes:
        return [data]
    return [node.add(_REDUCE[node.op], [data], ReduceAttrs(axes, keep))]


@converter("ARG_MAX", "ARG_MIN")
def convert_arg_max(node: TFLiteNode) -> list[Value]:
    data = node.input(0)
    axis = int(node.constant(1, "axis").reshape(-1)[0]) % data.type.ndim
    op = "argmax" if node.op == "ARG_MAX" else "argmin"
    out = node.add(op, [data], ArgReduceAttrs(axis, keepdims=False), "index")
    dtype = node.output_types[0].dtype
    if dtype not in ("int64", "int32"):
        raise unsupported(node, f"output type {dtype}")
    if dtype == "int64":
        return [out]
    return [node.add("cast", [out], CastAttrs(dtype))]
