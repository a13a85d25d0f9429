"""ONNX converters for elementwise and broadcasting ops, onto `ember/graph/ops/math.py`.

Most ONNX elementwise ops map one-to-one onto a graph op; those are table rows. The
rest (variadic Sum/Mean/Min/Max, Clip's two forms, PRelu's slope, Cast, Dropout,
Constant) have a small function each.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember.errors import ModelLoadError, ShapeError, UnsupportedOperatorError
from ember.frontend.onnx.registry import (
    ConversionContext,
    Converter,
    OnnxNode,
    converter,
    dtype_from_onnx,
    single_value,
)
from ember.graph.ir import FLOAT_DTYPES, Attrs, Value
from ember.graph.ops.attrs import (
    AlphaAttrs,
    CastAttrs,
    ClipAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    ReshapeAttrs,
    SeluAttrs,
    ShapeAttrs,
)
from ember.graph.ops.math import broadcast_shapes

# ONNX op -> graph op, for ops with neither attributes nor optional inputs.
UNARY_OPS = {
    "Relu": "relu",
    "Sigmoid": "sigmoid",
    "Tanh": "tanh",
    "Erf": "erf",
    "Exp": "exp",
    "Log": "log",
    "Sqrt": "sqrt",
    "Reciprocal": "reciprocal",
    "Neg": "negative",
    "Abs": "abs",
    "Floor": "floor",
    "Ceil": "ceil",
    "Round": "round",
    "Sign": "sign",
    "Sin": "sin",
    "Cos": "cos",
    "Softplus": "softplus",
    "Softsign": "softsign",
    "HardSwish": "hard_swish",
    "Mish": "mish",
    "Not": "logical_not",
}

BINARY_OPS = {
    "Add": "add",
    "Sub": "subtract",
    "Mul": "multiply",
    "Div": "divide",
    "Pow": "power",
    "Equal": "equal",
    "Less": "less",
    "Greater": "greater",
    "LessOrEqual": "less_equal",
    "GreaterOrEqual": "greater_equal",
    "And": "logical_and",
    "Or": "logical_or",
    "Xor": "logical_xor",
}

# ONNX op -> (graph op, attrs from the node), with ONNX's attribute defaults.
UNARY_WITH_ATTRS_OPS: dict[str, tuple[str, Callable[[OnnxNode], Attrs]]] = {
    "LeakyRelu": ("leaky_relu", lambda n: AlphaAttrs(n.float_attr("alpha", 0.01))),
    "Elu": ("elu", lambda n: AlphaAttrs(n.float_attr("alpha", 1.0))),
    "Selu": (
        "selu",
        lambda n: SeluAttrs(
            n.float_attr("alpha", 1.67326319217681884765625),
            n.float_attr("gamma", 1.05070102214813232421875),
        ),
    ),
    "HardSigmoid": (
        "hard_sigmoid",
        lambda n: HardSigmoidAttrs(n.float_attr("alpha", 0.2), n.float_attr("beta", 0.5)),
    ),
    "Gelu": ("gelu", lambda n: GeluAttrs(str(n.attr("approximate", "none")))),
}

# Variadic ONNX ops folded left-to-right with a binary graph op.
VARIADIC_OPS = {"Sum": "add", "Max": "maximum", "Min": "minimum", "Mean": "add"}


def _unary(op: str) -> Converter:
    def convert(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
        return [ctx.builder.add(op, [node.input(0)], name=node.name)]

    return convert


def _unary_with_attrs(op: str, make_attrs: Callable[[OnnxNode], Attrs]) -> Converter:
    def convert(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
        return [ctx.builder.add(op, [node.input(0)], make_attrs(node), name=node.name)]

    return convert


# ONNX's And, Or and Xor take bool tensors only (their type constraint T is bool).
_BOOL_ONLY = frozenset({"logical_and", "logical_or", "logical_xor"})


def _binary(op: str) -> Converter:
    def convert(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
        a, b = node.input(0), node.input(1)
        if op in _BOOL_ONLY and (a.dtype != "bool" or b.dtype != "bool"):
            raise ModelLoadError(
                f"{node.where}: inputs of {a.dtype} and {b.dtype}; ONNX's {node.op_type} "
                "takes bool tensors only. Cast the inputs to bool (e.g. a Cast or a "
                "comparison) in the model"
            )
        return [ctx.builder.add(op, [a, b], name=node.name)]

    return convert


def _variadic(onnx_op: str, op: str) -> Converter:
    def convert(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
        operands = [v for v in node.inputs if v is not None]
        if not operands:
            raise ModelLoadError(f"node {node.name!r} ({onnx_op}) has no inputs")
        result = operands[0]
        for operand in operands[1:]:
            result = ctx.builder.add(op, [result, operand], name=node.name)
        if onnx_op == "Mean" and len(operands) > 1:
            count = ctx.builder.constant(len(operands), dtype=result.dtype)
            result = ctx.builder.add("divide", [result, count], name=node.name)
        return [result]

    return convert


def _register_tables() -> None:
    for onnx_op, op in UNARY_OPS.items():
        converter(onnx_op)(_unary(op))
    for onnx_op, op in BINARY_OPS.items():
        converter(onnx_op)(_binary(op))
    for onnx_op, (op, make_attrs) in UNARY_WITH_ATTRS_OPS.items():
        converter(onnx_op)(_unary_with_attrs(op, make_attrs))
    for onnx_op, op in VARIADIC_OPS.items():
        converter(onnx_op)(_variadic(onnx_op, op))


_register_tables()


@converter("Mod")
def convert_mod(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    # fmod=1: C's fmod (sign of the dividend); fmod=0: Python's % (sign of the divisor).
    op = "mod" if int(node.attr("fmod", 0)) else "floor_mod"  # type: ignore[call-overload]
    return [ctx.builder.add(op, [node.input(0), node.input(1)], name=node.name)]


@converter("Where")
def convert_where(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    inputs = [node.input(0), node.input(1), node.input(2)]
    return [ctx.builder.add("where", inputs, name=node.name)]


@converter("Clip")
def convert_clip(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """Before opset 11 the bounds are attributes; from 11 optional scalar inputs."""
    x = node.input(0)
    if ctx.opset < 11:
        low: float | None = node.float_attr("min", -np.inf, infinite=True)
        high: float | None = node.float_attr("max", np.inf, infinite=True)
        return [_clip_constant(ctx, node, x, low, high)]
    bounds = [node.optional_input(1), node.optional_input(2)]
    arrays = [ctx.constant(b) for b in bounds]
    if x.dtype in FLOAT_DTYPES and all(
        bound is None or array is not None for bound, array in zip(bounds, arrays, strict=True)
    ):
        low, high = (
            None if a is None else float(single_value(node, a, f"the {which} bound"))
            for a, which in zip(arrays, ("lower", "upper"), strict=True)
        )
        return [_clip_constant(ctx, node, x, low, high)]
    # Integer bounds stay exact, and run-time bounds stay inputs, as max/min ops.
    result = x
    for bound, op in zip(bounds, ("maximum", "minimum"), strict=True):
        if bound is not None:
            result = ctx.builder.add(op, [result, bound], name=node.name)
    return [result]


def _clip_constant(
    ctx: ConversionContext, node: OnnxNode, x: Value, low: float | None, high: float | None
) -> Value:
    # A NaN bound bounds nothing, as in ONNX Runtime (NaN fails every comparison).
    low = None if low is None or low == -np.inf or np.isnan(low) else low
    high = None if high is None or high == np.inf or np.isnan(high) else high
    if low is None and high is None:
        return x
    return ctx.builder.add("clip", [x], ClipAttrs(low, high), name=node.name)


@converter("PRelu")
def convert_prelu(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """The slope broadcasts onto x unidirectionally (opset 7+). A 1-d slope with one
    value per channel of an N-d input (the older per-channel form) becomes (C, 1, ...)."""
    x, slope = node.input(0), node.input(1)
    if not _broadcasts_onto(slope.shape, x.shape):
        rank = len(x.shape)
        if len(slope.shape) == 1 and rank >= 2 and slope.shape[0] == x.shape[1]:
            slope = _reshape_constant_or_node(ctx, slope, (x.shape[1],) + (1,) * (rank - 2))
        else:
            raise ShapeError(
                f"PRelu slope of shape {slope.shape} cannot broadcast onto the input's "
                f"shape {x.shape}"
            )
    return [ctx.builder.add("prelu", [x, slope], name=node.name)]


def _broadcasts_onto(source: tuple[int, ...], target: tuple[int, ...]) -> bool:
    try:
        return broadcast_shapes(source, target) == tuple(target)
    except ShapeError:
        return False


def _reshape_constant_or_node(
    ctx: ConversionContext, value: Value, shape: tuple[int, ...]
) -> Value:
    array = ctx.constant(value)
    if array is not None:
        return ctx.builder.constant(array.reshape(shape))
    return ctx.builder.add("reshape", [value], ReshapeAttrs(shape))


@converter("Cast")
def convert_cast(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    where = f"node {node.name!r} (Cast) attribute 'to'"
    dtype = dtype_from_onnx(int(node.attr("to")), where)  # type: ignore[call-overload]
    return [_cast(ctx, node, node.input(0), dtype)]


@converter("CastLike")
def convert_cast_like(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    return [_cast(ctx, node, node.input(0), node.input(1).dtype)]


def _cast(ctx: ConversionContext, node: OnnxNode, x: Value, dtype: str) -> Value:
    if x.dtype == dtype:
        return x
    return ctx.builder.add("cast", [x], CastAttrs(dtype), name=node.name)


@converter("Identity")
def convert_identity(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    # No node: the loader gives graph outputs their names itself.
    return [node.input(0)]


@converter("Dropout")
def convert_dropout(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    """Inference: the output is the input and the mask is all ones. In training mode
    (opset 12+ `training_mode` input) only a zero ratio is deterministic."""
    x = node.input(0)
    if ctx.opset >= 12 and _dropout_training(ctx, node):
        ratio = ctx.constant(node.optional_input(1))
        if ratio is None or float(single_value(node, ratio, "ratio")) != 0.0:
            raise UnsupportedOperatorError(
                f"node {node.name!r} (Dropout) runs in training mode, which is random; "
                "Ember compiles inference graphs (export the model in eval mode)"
            )
    mask = None
    if node.num_outputs > 1:
        # The mask is bool from opset 10; before, it had the input's type.
        mask_dtype = "bool" if ctx.opset >= 10 else x.dtype
        true = ctx.builder.constant(np.ones((), dtype=mask_dtype))
        mask = ctx.builder.add("broadcast_to", [true], ShapeAttrs(x.shape), f"{node.name}:mask")
    return [x, mask]


def _dropout_training(ctx: ConversionContext, node: OnnxNode) -> bool:
    training = node.optional_input(2)
    if training is None:
        return False
    array = ctx.constant(training)
    if array is None:
        raise UnsupportedOperatorError(
            f"node {node.name!r} (Dropout): training_mode must be a constant; Ember "
            "compiles inference graphs"
        )
    return bool(single_value(node, array, "training_mode"))


# Constant's value attributes: name -> how to make the array.
CONSTANT_FORMS: dict[str, Callable[[object], np.ndarray]] = {
    "value": lambda v: np.asarray(v),
    "sparse_value": lambda v: np.asarray(v),
    "value_float": lambda v: np.asarray(v, dtype=np.float32),
    "value_floats": lambda v: np.asarray(v, dtype=np.float32).reshape(-1),
    "value_int": lambda v: np.asarray(v, dtype=np.int64),
    "value_ints": lambda v: np.asarray(v, dtype=np.int64).reshape(-1),
}


@converter("Constant")
def convert_constant(ctx: ConversionContext, node: OnnxNode) -> Sequence[Value | None]:
    for name, make_array in CONSTANT_FORMS.items():
        if name in node.attrs:
            return [ctx.builder.param(node.name, make_array(node.attrs[name]))]
    if "value_string" in node.attrs or "value_strings" in node.attrs:
        raise UnsupportedOperatorError(
            f"node {node.name!r} (Constant) holds strings, which Ember does not support"
        )
    raise ModelLoadError(f"node {node.name!r} (Constant) has no value attribute")
