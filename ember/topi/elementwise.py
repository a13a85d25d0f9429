"""Elementwise ops: `T_relu(ax0, ...) = max(x[ax0, ...], 0f)` and the rest of the unary
ops of `ember.graph.ops.math`, plus `cast`.

Each op is one formula on a scalar expression, written for floating-point data with
constants typed like the data. Integer data computes math functions in float64 and
casts back, as the NumPy references do when they apply a float function to ints.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import (
    AlphaAttrs,
    CastAttrs,
    ClipAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    SeluAttrs,
)
from ember.te import Expr, Tensor, call, cast, compute, logical_not, maximum, minimum, select
from ember.topi.common import ELEMWISE, Declaration, axis_names, is_float, typed

ScalarFn = Callable[[Expr], Expr]


def elementwise(name: str, x: Tensor, fn: ScalarFn, tag: str = ELEMWISE) -> Tensor:
    """`T_<name>(ax0, ...) = fn(x[ax0, ...])`."""
    return compute(
        x.shape, lambda *ax: fn(x[ax]), name=f"T_{name}", tag=tag, axis_names=axis_names(x.ndim)
    )


def via_float(fn: ScalarFn) -> ScalarFn:
    """`fn` on floating-point values; other dtypes go through float64 and back."""

    def apply(x: Expr) -> Expr:
        if is_float(x.dtype):
            return fn(x)
        return cast(x.dtype, fn(cast("float64", x)))

    return apply


def _math(name: str) -> ScalarFn:
    return via_float(lambda x: call(name, x))


def absolute(x: Expr) -> Expr:
    if is_float(x.dtype):
        return call("abs", x)
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return x
    return select(x < typed(0, x.dtype), -x, x)


def clip(x: Expr, low: float | None, high: float | None) -> Expr:
    if low is not None:
        x = maximum(x, typed(low, x.dtype))
    if high is not None:
        x = minimum(x, typed(high, x.dtype))
    return x


def softplus(x: Expr) -> Expr:
    """log(1 + exp(x)) without overflow: max(x, 0) + log1p(exp(-|x|))."""
    zero = typed(0, x.dtype)
    return maximum(x, zero) + call("log1p", call("exp", -absolute(x)))


def _sign(x: Expr) -> Expr:
    one, zero = typed(1, x.dtype), typed(0, x.dtype)
    if x.dtype.startswith("uint") or x.dtype == "bool":
        return select(x > zero, one, zero)
    return select(x > zero, one, select(x < zero, typed(-1, x.dtype), zero))


def _integral_identity(name: str) -> ScalarFn:
    """floor / ceil / round: the identity on integers."""
    return lambda x: call(name, x) if is_float(x.dtype) else x


def _hard_swish(x: Expr) -> Expr:
    gate = x / typed(6, x.dtype) + typed(0.5, x.dtype)
    return x * clip(gate, 0, 1)


UNARY: dict[str, ScalarFn] = {
    "identity": lambda x: x,
    "relu": lambda x: maximum(x, typed(0, x.dtype)),
    "sigmoid": _math("sigmoid"),
    "tanh": _math("tanh"),
    "erf": _math("erf"),
    "exp": _math("exp"),
    "log": _math("log"),
    "sqrt": _math("sqrt"),
    "sin": _math("sin"),
    "cos": _math("cos"),
    # Integer reciprocal truncates (1, 0 or -1), as NumPy's does.
    "reciprocal": lambda x: typed(1, x.dtype) / x,
    "negative": lambda x: -x,
    "abs": absolute,
    "floor": _integral_identity("floor"),
    "ceil": _integral_identity("ceil"),
    "round": _integral_identity("round"),
    "sign": _sign,
    "softplus": via_float(softplus),
    "softsign": via_float(lambda x: x / (typed(1, x.dtype) + absolute(x))),
    "hard_swish": via_float(_hard_swish),
    "mish": via_float(lambda x: x * call("tanh", softplus(x))),
    "logical_not": logical_not,
}


AttrsFn = Callable[[Expr, Attrs], Expr]


def _leaky_relu(x: Expr, attrs: Attrs) -> Expr:
    assert isinstance(attrs, AlphaAttrs)
    return select(x < typed(0, x.dtype), typed(attrs.alpha, x.dtype) * x, x)


def _elu(x: Expr, attrs: Attrs) -> Expr:
    assert isinstance(attrs, AlphaAttrs)
    return select(x < typed(0, x.dtype), typed(attrs.alpha, x.dtype) * call("expm1", x), x)


def _selu(x: Expr, attrs: Attrs) -> Expr:
    assert isinstance(attrs, SeluAttrs)
    negative = typed(attrs.alpha, x.dtype) * call("expm1", x)
    return typed(attrs.gamma, x.dtype) * select(x <= typed(0, x.dtype), negative, x)


def _hard_sigmoid(x: Expr, attrs: Attrs) -> Expr:
    assert isinstance(attrs, HardSigmoidAttrs)
    return clip(typed(attrs.alpha, x.dtype) * x + typed(attrs.beta, x.dtype), 0, 1)


def _gelu(x: Expr, attrs: Attrs) -> Expr:
    assert isinstance(attrs, GeluAttrs)
    half, one = typed(0.5, x.dtype), typed(1, x.dtype)
    if attrs.approximate == "tanh":
        cubic = x + typed(0.044715, x.dtype) * (x * x * x)
        inner = typed(math.sqrt(2 / math.pi), x.dtype) * cubic
        return half * x * (one + call("tanh", inner))
    return half * x * (one + call("erf", x / typed(math.sqrt(2), x.dtype)))


def _clip(x: Expr, attrs: Attrs) -> Expr:
    assert isinstance(attrs, ClipAttrs)
    return clip(x, attrs.low, attrs.high)


def _via_float_with_attrs(fn: AttrsFn) -> AttrsFn:
    return lambda x, attrs: via_float(lambda value: fn(value, attrs))(x)


# Unary ops with attributes: name -> formula of (x, attrs).
UNARY_WITH_ATTRS: dict[str, AttrsFn] = {
    "leaky_relu": _via_float_with_attrs(_leaky_relu),
    "elu": _via_float_with_attrs(_elu),
    "selu": _via_float_with_attrs(_selu),
    "hard_sigmoid": _via_float_with_attrs(_hard_sigmoid),
    "gelu": _via_float_with_attrs(_gelu),
    "clip": _clip,
}


def _unary(name: str) -> Declaration:
    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        return [elementwise(name, inputs[0], UNARY[name])]

    return declare


def _unary_with_attrs(name: str) -> Declaration:
    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        formula = UNARY_WITH_ATTRS[name]
        return [elementwise(name, inputs[0], lambda x: formula(x, attrs))]

    return declare


def _cast(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, CastAttrs)
    return [elementwise("cast", inputs[0], lambda x: cast(attrs.dtype, x))]


DECLARATIONS: dict[str, Declaration] = {
    **{name: _unary(name) for name in UNARY},
    **{name: _unary_with_attrs(name) for name in UNARY_WITH_ATTRS},
    "cast": _cast,
}
