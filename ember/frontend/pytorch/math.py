"""ATen converters for arithmetic: binary ops with torch's scalar operands and
promotion, comparisons and logic, activations and other unary functions, and
reductions.
"""

from __future__ import annotations

import math

from ember.frontend.pytorch.registry import (
    DEFAULT_FLOAT,
    ConversionContext,
    TorchNode,
    converter,
    unsupported,
)
from ember.graph.ir import FLOAT_DTYPES, Value
from ember.graph.ops.attrs import (
    AlphaAttrs,
    ArgReduceAttrs,
    ClipAttrs,
    GeluAttrs,
    ReduceAttrs,
)

# -- binary ---------------------------------------------------------------------------

_BINARY = {
    "aten.add.Tensor": "add", "aten.sub.Tensor": "subtract",
    "aten.mul.Tensor": "multiply", "aten.mul.Scalar": "multiply", "aten.div.Tensor": "divide",
    "aten.pow.Tensor_Tensor": "power", "aten.pow.Tensor_Scalar": "power",
    "aten.maximum.default": "maximum", "aten.minimum.default": "minimum",
    "aten.remainder.Tensor": "floor_mod", "aten.remainder.Scalar": "floor_mod",
    "aten.fmod.Tensor": "mod", "aten.fmod.Scalar": "mod",
}  # fmt: skip


@converter(*_BINARY)
def convert_binary(ctx: ConversionContext, node: TorchNode) -> Value:
    a, b = node.arg(0, "self"), node.arg(1, "other")
    alpha = node.kwargs.get("alpha", 1)
    if alpha != 1 and node.target.startswith(("aten.add", "aten.sub")):
        if isinstance(b, Value):
            b = ctx.add("multiply", list(ctx.operands(node, b, alpha)), node, suffix="alpha")
        else:
            b = b * alpha  # type: ignore[operator]
    op = _BINARY[node.target]
    if op == "divide":
        # True division: integers divide as floats.
        a, b = (_as_float(ctx, node, x) for x in (a, b))
    if op == "power" and isinstance(b, int | float) and not isinstance(b, bool):
        return _power(ctx, node, a, float(b))  # type: ignore[arg-type]
    x, y = ctx.operands(node, a, b)
    return ctx.add(op, [x, y], node)


def _as_float(ctx: ConversionContext, node: TorchNode, x: object) -> object:
    if isinstance(x, Value) and x.dtype not in FLOAT_DTYPES:
        return ctx.cast(x, DEFAULT_FLOAT, node)
    return float(x) if isinstance(x, int) else x


def _power(ctx: ConversionContext, node: TorchNode, base: Value, exponent: float) -> Value:
    """x ** c: squares and square roots as such (exact and cheaper than pow)."""
    if exponent == 1.0:
        return base
    if exponent == 2.0:
        return ctx.add("multiply", [base, base], node)
    if exponent == 0.5:
        return ctx.add("sqrt", [base], node)
    if exponent == -0.5:
        root = ctx.add("sqrt", [base], node, suffix="sqrt")
        return ctx.add("reciprocal", [root], node)
    x, y = ctx.operands(node, base, exponent)
    return ctx.add("power", [x, y], node)


@converter("aten.div.Tensor_mode")
def convert_div_mode(ctx: ConversionContext, node: TorchNode) -> Value:
    mode = node.kwargs.get("rounding_mode", node.arg(2, "rounding_mode", None))
    a, b = node.arg(0, "self"), node.arg(1, "other")
    if mode is None:  # true division
        a, b = _as_float(ctx, node, a), _as_float(ctx, node, b)
    x, y = ctx.operands(node, a, b)
    if mode is None:
        return ctx.add("divide", [x, y], node)
    if x.dtype not in FLOAT_DTYPES:
        if mode == "floor":
            # Integer floor division: x - floor_mod(x, y) is a multiple of y.
            rest = ctx.add("floor_mod", [x, y], node, suffix="mod")
            exact = ctx.add("subtract", [x, rest], node, suffix="exact")
            return ctx.add("divide", [exact, y], node)
        raise unsupported(node, "integer division that truncates is not supported")
    quotient = ctx.add("divide", [x, y], node, suffix="quotient")
    if mode == "floor":
        return ctx.add("floor", [quotient], node)
    # trunc: toward zero, sign(q) * floor(|q|)
    magnitude = ctx.add(
        "floor", [ctx.add("abs", [quotient], node, suffix="abs")], node, suffix="floor"
    )
    return ctx.add("multiply", [ctx.add("sign", [quotient], node, suffix="sign"), magnitude], node)


# -- comparisons and logic ------------------------------------------------------------

_COMPARE = {"eq": "equal", "lt": "less", "le": "less_equal", "gt": "greater", "ge": "greater_equal"}


@converter(*(f"aten.{c}.{kind}" for c in (*_COMPARE, "ne") for kind in ("Tensor", "Scalar")))
def convert_compare(ctx: ConversionContext, node: TorchNode) -> Value:
    x, y = ctx.operands(node, node.arg(0, "self"), node.arg(1, "other"))
    name = node.target.split(".")[1]
    if name == "ne":
        same = ctx.add("equal", [x, y], node, suffix="equal")
        return ctx.add("logical_not", [same], node)
    return ctx.add(_COMPARE[name], [x, y], node)


_LOGIC = {
    "aten.logical_and.default": "logical_and", "aten.bitwise_and.Tensor": "logical_and",
    "aten.logical_or.default": "logical_or", "aten.bitwise_or.Tensor": "logical_or",
    "aten.logical_xor.default": "logical_xor", "aten.bitwise_xor.Tensor": "logical_xor",
}  # fmt: skip


@converter(*_LOGIC)
def convert_logic(ctx: ConversionContext, node: TorchNode) -> Value:
    x, y = (_as_bool(ctx, node, v) for v in (node.value(0, "self"), node.value(1, "other")))
    return ctx.add(_LOGIC[node.target], [x, y], node)


@converter("aten.logical_not.default", "aten.bitwise_not.default")
def convert_logical_not(ctx: ConversionContext, node: TorchNode) -> Value:
    return ctx.add("logical_not", [_as_bool(ctx, node, node.value(0))], node)


def _as_bool(ctx: ConversionContext, node: TorchNode, value: Value) -> Value:
    """A bool tensor; bitwise ops on integers are not logic, and are refused."""
    if value.dtype == "bool":
        return value
    if node.target.startswith("aten.bitwise"):
        raise unsupported(node, "bitwise operations on integers are not supported")
    zero = ctx.scalar(0, value.dtype)
    same = ctx.add("equal", [value, zero], node, suffix="is_zero")
    return ctx.add("logical_not", [same], node, suffix="bool")


@converter("aten.where.self")
def convert_where(ctx: ConversionContext, node: TorchNode) -> Value:
    condition = _as_bool(ctx, node, node.value(0, "condition"))
    x, y = ctx.operands(node, node.arg(1, "self"), node.arg(2, "other"))
    return ctx.add("where", [condition, x, y], node)


# -- clamps -----------------------------------------------------------------------------


def _bound(value: object) -> float | None:
    return None if value is None else float(value)  # type: ignore[arg-type]


@converter("aten.clamp.default", "aten.clamp.Tensor", "aten.hardtanh.default")
def convert_clamp(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    if node.target == "aten.hardtanh.default":
        low, high = node.arg(1, "min_val", -1.0), node.arg(2, "max_val", 1.0)
    else:
        low, high = node.arg(1, "min", None), node.arg(2, "max", None)
    if isinstance(low, Value) or isinstance(high, Value):
        out = data
        if low is not None:
            out = ctx.add("maximum", list(ctx.operands(node, out, low)), node, suffix="min")
        if high is not None:
            out = ctx.add("minimum", list(ctx.operands(node, out, high)), node, suffix="max")
        return out
    if data.dtype not in FLOAT_DTYPES and (isinstance(low, float) or isinstance(high, float)):
        data = ctx.cast(data, DEFAULT_FLOAT, node)
    return ctx.add("clip", [data], node, ClipAttrs(_bound(low), _bound(high)))


# -- unary --------------------------------------------------------------------------------

_UNARY = {
    "relu": "relu", "sigmoid": "sigmoid", "tanh": "tanh", "exp": "exp", "log": "log",
    "sqrt": "sqrt", "erf": "erf", "neg": "negative", "abs": "abs", "reciprocal": "reciprocal",
    "sin": "sin", "cos": "cos", "floor": "floor", "ceil": "ceil", "round": "round",
    "sign": "sign",
}  # fmt: skip


@converter(*(f"aten.{name}.default" for name in _UNARY))
def convert_unary(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    op = _UNARY[node.target.split(".")[1]]
    if op not in ("abs", "negative", "sign", "relu") and data.dtype not in FLOAT_DTYPES:
        data = ctx.cast(data, DEFAULT_FLOAT, node)
    return ctx.add(op, [data], node)


@converter("aten.rsqrt.default")
def convert_rsqrt(ctx: ConversionContext, node: TorchNode) -> Value:
    root = ctx.add("sqrt", [node.value(0)], node, suffix="sqrt")
    return ctx.add("reciprocal", [root], node)


@converter("aten.log1p.default", "aten.expm1.default")
def convert_log1p_expm1(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    one = ctx.scalar(1, data.dtype)
    if node.target == "aten.log1p.default":
        return ctx.add("log", [ctx.add("add", [data, one], node, suffix="plus_one")], node)
    return ctx.add("subtract", [ctx.add("exp", [data], node, suffix="exp"), one], node)


@converter("aten.gelu.default")
def convert_gelu(ctx: ConversionContext, node: TorchNode) -> Value:
    approximate = str(node.kwargs.get("approximate", node.arg(1, "approximate", "none")))
    return ctx.add("gelu", [node.value(0)], node, GeluAttrs(approximate))


@converter("aten.leaky_relu.default")
def convert_leaky_relu(ctx: ConversionContext, node: TorchNode) -> Value:
    return ctx.add(
        "leaky_relu", [node.value(0)], node, AlphaAttrs(node.float_(1, "negative_slope", 0.01))
    )


@converter("aten.elu.default")
def convert_elu(ctx: ConversionContext, node: TorchNode) -> Value:
    """elu(self, alpha, scale, input_scale): scale * (x > 0 ? x : alpha * (exp(x) - 1))
    for an input_scale of 1."""
    alpha, scale = node.float_(1, "alpha", 1.0), node.float_(2, "scale", 1.0)
    if node.float_(3, "input_scale", 1.0) != 1.0:
        raise unsupported(node, "input_scale other than 1 is not supported")
    out = ctx.add("elu", [node.value(0)], node, AlphaAttrs(alpha), "elu" if scale != 1.0 else "")
    if scale == 1.0:
        return out
    return ctx.add("multiply", [out, ctx.scalar(scale, out.dtype)], node)


# -- reductions ---------------------------------------------------------------------------


def _reduce_axes(node: TorchNode, data: Value, index: int = 1) -> tuple[int, ...]:
    rank = data.type.ndim
    dims = node.arg(index, "dim", None)
    if dims is None or dims == []:  # torch: all axes
        return tuple(range(rank))
    listed = node.ints(index, "dim")
    return tuple(sorted({d % max(rank, 1) for d in listed}))


def _keepdim(node: TorchNode, index: int) -> bool:
    return bool(node.arg(index, "keepdim", node.kwargs.get("keepdim", False)))


_REDUCE = {
    "aten.sum.dim_IntList": "reduce_sum", "aten.mean.dim": "reduce_mean",
    "aten.mean.default": "reduce_mean", "aten.amax.default": "reduce_max",
    "aten.amin.default": "reduce_min", "aten.prod.dim_int": "reduce_prod",
}  # fmt: skip


_NARROW_INTEGERS = {"bool", "int8", "uint8", "int16", "int32"}


@converter(*_REDUCE)
def convert_reduce(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    whole = node.target == "aten.mean.default"  # amax.default and the like take dims
    axes = tuple(range(data.type.ndim)) if whole else _reduce_axes(node, data)
    keepdim = False if whole else _keepdim(node, 2)
    dtype = node.kwargs.get("dtype")
    if dtype is not None:
        data = ctx.cast(data, str(dtype), node)
    elif node.target.startswith(("aten.sum", "aten.prod")) and data.dtype in _NARROW_INTEGERS:
        data = ctx.cast(data, "int64", node)  # torch sums integers in int64
    if not axes:
        return data
    return ctx.add(_REDUCE[node.target], [data], node, ReduceAttrs(axes, keepdim))


# all() reaches Ember as not(any(not x)) (core decomposition).
@converter("aten.any.dim", "aten.any.dims", "aten.any.default")
def convert_any(ctx: ConversionContext, node: TorchNode) -> Value:
    data = _as_bool(ctx, node, node.value(0))
    whole = node.target.endswith(".default")
    axes = tuple(range(data.type.ndim)) if whole else _reduce_axes(node, data)
    keepdim = False if whole else _keepdim(node, 2)
    numbers = ctx.cast(data, DEFAULT_FLOAT, node)
    reduced = ctx.add("reduce_max", [numbers], node, ReduceAttrs(axes, keepdim), "reduce")
    return ctx.add("greater", [reduced, ctx.scalar(0.5, DEFAULT_FLOAT)], node)


@converter("aten.var.correction")
def convert_var(ctx: ConversionContext, node: TorchNode) -> Value:
    """var(self, dim, correction, keepdim): the mean squared deviation, divided by N -
    correction instead of N."""
    data = node.value(0)
    axes = _reduce_axes(node, data)
    given = node.kwargs.get("correction")
    correction = 1.0 if given is None else float(given)  # type: ignore[arg-type]
    keepdim = bool(node.kwargs.get("keepdim", False))
    count = math.prod(data.shape[a] for a in axes)
    mean = ctx.add("reduce_mean", [data], node, ReduceAttrs(axes, True), "mean")
    centred = ctx.add("subtract", [data, mean], node, suffix="centred")
    squares = ctx.add("multiply", [centred, centred], node, suffix="squares")
    total = ctx.add("reduce_sum", [squares], node, ReduceAttrs(axes, keepdim), "sum")
    divisor = ctx.scalar(max(count - correction, 0), data.dtype)
    return ctx.add("divide", [total, divisor], node)


@converter("aten.argmax.default", "aten.argmin.default")
def convert_argmax(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    dim = node.arg(1, "dim", None)
    keepdim = _keepdim(node, 2)
    if dim is None:
        data = ctx.reshape(data, (data.type.size,), node, "flat")
        dim, keepdim = 0, False
    op = "argmax" if node.target == "aten.argmax.default" else "argmin"
    return ctx.add(op, [data], node, ArgReduceAttrs(int(dim) % data.type.ndim, keepdim))  # type: ignore[call-overload]


@converter("aten.max.dim", "aten.min.dim")
def convert_max_dim(ctx: ConversionContext, node: TorchNode) -> tuple[Value | None, ...]:
    data = node.value(0)
    axis = node.int_(1, "dim") % data.type.ndim
    keepdim = _keepdim(node, 2)
    largest = node.target == "aten.max.dim"
    values = ctx.add("reduce_max" if largest else "reduce_min", [data], node,
                     ReduceAttrs((axis,), keepdim), "values")  # fmt: skip
    indices = ctx.add("argmax" if largest else "argmin", [data], node,
                      ArgReduceAttrs(axis, keepdim), "indices")  # fmt: skip
    return values, indices


@converter("aten.linalg_vector_norm.default")
def convert_vector_norm(ctx: ConversionContext, node: TorchNode) -> Value:
    data = node.value(0)
    order = node.float_(1, "ord", 2.0)
    ops = {1.0: "reduce_l1", 2.0: "reduce_l2"}
    if order not in ops:
        raise unsupported(node, f"ord {order} (Ember supports 1 and 2)")
    axes = _reduce_axes(node, data, 2)
    return ctx.add(ops[order], [data], node, ReduceAttrs(axes, _keepdim(node, 3)))
