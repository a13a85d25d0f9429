"""Elementwise and broadcasting math ops: one table row per op."""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import MAX_RANK, Attrs, NoAttrs, TensorType
from ember.graph.ops.attrs import (
    AlphaAttrs,
    CastAttrs,
    ClipAttrs,
    GeluAttrs,
    HardSigmoidAttrs,
    SeluAttrs,
)
from ember.graph.ops.registry import OpDef, OpPattern, ReferenceFn, register_op

_erf = np.vectorize(math.erf, otypes=[np.float64])


def erf(x: np.ndarray) -> np.ndarray:
    """Exact (double precision) erf; NumPy has none and SciPy is not a dependency."""
    return _erf(x.astype(np.float64)).astype(x.dtype) if x.size else x.copy()


def _sigmoid(x: np.ndarray) -> np.ndarray:
    # Split by sign so that exp never overflows.
    out = np.empty_like(x)
    positive = x >= 0
    out[positive] = 1 / (1 + np.exp(-x[positive]))
    exp_x = np.exp(x[~positive])
    out[~positive] = exp_x / (1 + exp_x)
    return out


def _softplus(x: np.ndarray) -> np.ndarray:
    return np.logaddexp(x, np.zeros_like(x))


def _gelu(x: np.ndarray, attrs: GeluAttrs) -> np.ndarray:
    if attrs.approximate == "tanh":
        inner = math.sqrt(2 / math.pi) * (x + 0.044715 * x**3)
        return 0.5 * x * (1 + np.tanh(inner))
    return 0.5 * x * (1 + erf(x / math.sqrt(2)))


def _round_half_even(x: np.ndarray) -> np.ndarray:
    return np.round(x)  # NumPy rounds half to even, as ONNX Round does


# Unary ops without attributes: name -> NumPy function.
UNARY: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "identity": lambda x: x.copy(),
    "relu": lambda x: np.maximum(x, np.zeros((), x.dtype)),
    "sigmoid": _sigmoid,
    "tanh": np.tanh,
    "erf": erf,
    "exp": np.exp,
    "log": np.log,
    "sqrt": np.sqrt,
    "reciprocal": np.reciprocal,
    "negative": np.negative,
    "abs": np.abs,
    "floor": np.floor,
    "ceil": np.ceil,
    "round": _round_half_even,
    "sign": np.sign,
    "sin": np.sin,
    "cos": np.cos,
    "softplus": _softplus,
    "softsign": lambda x: x / (1 + np.abs(x)),
    "hard_swish": lambda x: x * np.clip(x / 6 + 0.5, 0, 1),
    "mish": lambda x: x * np.tanh(_softplus(x)),
    "logical_not": np.logical_not,
}

# Unary ops with attributes: name -> (attrs type, function of (x, attrs)).
UNARY_WITH_ATTRS: dict[str, tuple[type[Attrs], Callable[[np.ndarray, Attrs], np.ndarray]]] = {
    "leaky_relu": (AlphaAttrs, lambda x, a: np.where(x < 0, a.alpha * x, x)),  # type: ignore[attr-defined]
    "elu": (AlphaAttrs, lambda x, a: np.where(x < 0, a.alpha * np.expm1(x), x)),  # type: ignore[attr-defined]
    "selu": (
        SeluAttrs,
        lambda x, a: a.gamma * np.where(x <= 0, a.alpha * np.expm1(x), x),  # type: ignore[attr-defined]
    ),
    "hard_sigmoid": (
        HardSigmoidAttrs,
        lambda x, a: np.clip(a.alpha * x + a.beta, 0, 1),  # type: ignore[attr-defined]
    ),
    "gelu": (GeluAttrs, _gelu),  # type: ignore[dict-item]
    "clip": (ClipAttrs, lambda x, a: _clip(x, a)),  # type: ignore[arg-type]
}


def _clip(x: np.ndarray, attrs: ClipAttrs) -> np.ndarray:
    out = x
    if attrs.low is not None:
        out = np.maximum(out, np.asarray(attrs.low, x.dtype))
    if attrs.high is not None:
        out = np.minimum(out, np.asarray(attrs.high, x.dtype))
    return out


def _int_divide(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    # ONNX (like C) truncates integer division toward zero; NumPy floors. Dividing in
    # floating point would round int64 beyond 2**53 (and all of uint64's top range), so
    # take C's remainder off first: what is left divides exactly, where floor and
    # truncation agree.
    if np.issubdtype(a.dtype, np.integer):
        with np.errstate(divide="ignore", invalid="ignore"):
            return np.floor_divide(a - np.fmod(a, b), b)
    return np.divide(a, b)


def _power(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    """The result has the base's dtype (ONNX Pow). An integer base with a fractional or
    negative exponent is computed in double precision and truncated, as C's pow and a
    cast would (NumPy would truncate the exponent first, or refuse negative ones)."""
    integer_base = np.issubdtype(a.dtype, np.integer)
    exact_integer = np.issubdtype(b.dtype, np.integer) and bool(np.all(b >= 0))
    if integer_base and exact_integer and b.size:
        # An exponent the base's type cannot hold would wrap negative in it.
        exact_integer = int(b.max()) <= np.iinfo(a.dtype).max
    if integer_base and not exact_integer:
        with np.errstate(invalid="ignore", over="ignore"):
            return np.power(a.astype(np.float64), b.astype(np.float64)).astype(a.dtype)
    return np.power(a, b.astype(a.dtype) if a.dtype != b.dtype else b)


# Binary broadcasting ops: name -> (function, output dtype or None for "same as lhs").
BINARY: dict[str, tuple[Callable[[np.ndarray, np.ndarray], np.ndarray], str | None]] = {
    "add": (np.add, None),
    "subtract": (np.subtract, None),
    "multiply": (np.multiply, None),
    "divide": (_int_divide, None),
    "power": (_power, None),
    "maximum": (np.maximum, None),
    "minimum": (np.minimum, None),
    "mod": (np.fmod, None),  # C's fmod: the result has the sign of the dividend
    "floor_mod": (np.mod, None),  # Python's %: the result has the sign of the divisor
    "equal": (np.equal, "bool"),
    "less": (np.less, "bool"),
    "less_equal": (np.less_equal, "bool"),
    "greater": (np.greater, "bool"),
    "greater_equal": (np.greater_equal, "bool"),
    "logical_and": (np.logical_and, "bool"),
    "logical_or": (np.logical_or, "bool"),
    "logical_xor": (np.logical_xor, "bool"),
    "prelu": (lambda x, slope: np.where(x < 0, slope * x, x), None),
}

# Ops whose operands may differ in dtype (the exponent of power).
_MIXED_DTYPE_OK = {"power"}


def broadcast_shapes(*shapes: Sequence[int]) -> tuple[int, ...]:
    """NumPy broadcasting of static shapes, with an EmberError on mismatch."""
    try:
        return tuple(int(d) for d in np.broadcast_shapes(*[tuple(s) for s in shapes]))
    except ValueError:
        raise ShapeError(
            f"shapes {', '.join(str(tuple(s)) for s in shapes)} cannot be broadcast together"
        ) from None
    except RuntimeError:  # NumPy broadcasts up to 32 axes (a shape Expand asks for, say)
        raise ShapeError(
            f"shapes of ranks {', '.join(str(len(s)) for s in shapes)}: Ember broadcasts "
            f"up to {MAX_RANK} axes"
        ) from None


# Ops on bool tensors: the logical ones take nothing else; arithmetic takes no bools
# (NumPy would compute `True - True` in ints, or refuse it, and C in ints again).
_LOGICAL = frozenset({"logical_not", "logical_and", "logical_or", "logical_xor"})
_ANY_DTYPE = frozenset({"identity", "equal"})


def _check_bools(name: str, inputs: Sequence[TensorType]) -> None:
    bools = [value.dtype == "bool" for value in inputs]
    if name in _LOGICAL and not all(bools):
        raise ShapeError(f"{name} takes bool tensors, got {', '.join(str(v) for v in inputs)}")
    if name not in _LOGICAL and name not in _ANY_DTYPE and any(bools):
        raise ShapeError(
            f"{name} does not take bool tensors (got {', '.join(str(v) for v in inputs)}); "
            "cast them to a number type first"
        )


def _unary_bool_check(name: str) -> Callable[[Sequence[TensorType], Attrs], tuple[TensorType, ...]]:
    def infer(inputs: Sequence[TensorType], attrs: Attrs) -> tuple[TensorType, ...]:
        _check_bools(name, inputs)
        return (inputs[0],)

    return infer


def _binary_infer(
    name: str, out_dtype: str | None
) -> Callable[[Sequence[TensorType], Attrs], tuple[TensorType, ...]]:
    def infer(inputs: Sequence[TensorType], attrs: Attrs) -> tuple[TensorType, ...]:
        lhs, rhs = inputs
        _check_bools(name, inputs)
        if lhs.dtype != rhs.dtype and name not in _MIXED_DTYPE_OK:
            raise ShapeError(f"{name}: operand dtypes differ ({lhs.dtype} vs {rhs.dtype})")
        shape = broadcast_shapes(lhs.shape, rhs.shape)
        return (TensorType(shape, out_dtype or lhs.dtype),)

    return infer


def _where_infer(inputs: Sequence[TensorType], attrs: Attrs) -> tuple[TensorType, ...]:
    cond, lhs, rhs = inputs
    if cond.dtype != "bool":
        raise ShapeError(f"where: condition must be bool, got {cond.dtype}")
    if lhs.dtype != rhs.dtype:
        raise ShapeError(f"where: branch dtypes differ ({lhs.dtype} vs {rhs.dtype})")
    return (TensorType(broadcast_shapes(cond.shape, lhs.shape, rhs.shape), lhs.dtype),)


def _cast_infer(inputs: Sequence[TensorType], attrs: CastAttrs) -> tuple[TensorType, ...]:
    return (TensorType(inputs[0].shape, attrs.dtype),)


def _apply_unary(fn: Callable[[np.ndarray], np.ndarray]) -> ReferenceFn:
    return lambda xs, attrs: (fn(xs[0]),)


def _apply_unary_with_attrs(fn: Callable[[np.ndarray, Attrs], np.ndarray]) -> ReferenceFn:
    return lambda xs, attrs: (fn(xs[0], attrs),)


def _apply_binary(fn: Callable[[np.ndarray, np.ndarray], np.ndarray]) -> ReferenceFn:
    return lambda xs, attrs: (fn(xs[0], xs[1]),)


def _register_all() -> None:
    for name, fn in UNARY.items():
        register_op(
            OpDef(
                name,
                OpPattern.ELEMWISE,
                _unary_bool_check(name),
                _apply_unary(fn),
            )
        )
    for name, (attrs_type, fn_attrs) in UNARY_WITH_ATTRS.items():
        register_op(
            OpDef(
                name,
                OpPattern.ELEMWISE,
                _unary_bool_check(name),
                _apply_unary_with_attrs(fn_attrs),
                attrs_type=attrs_type,
            )
        )
    for name, (fn_binary, out_dtype) in BINARY.items():
        register_op(
            OpDef(
                name,
                OpPattern.BROADCAST,
                _binary_infer(name, out_dtype),
                _apply_binary(fn_binary),
                min_inputs=2,
                max_inputs=2,
            )
        )
    register_op(
        OpDef(
            "where",
            OpPattern.BROADCAST,
            _where_infer,
            lambda xs, attrs: (np.where(xs[0], xs[1], xs[2]),),
            min_inputs=3,
            max_inputs=3,
        )
    )
    register_op(
        OpDef(
            "cast",
            OpPattern.ELEMWISE,
            _cast_infer,
            lambda xs, attrs: (xs[0].astype(attrs.dtype),),
            attrs_type=CastAttrs,
        )
    )


_register_all()

__all__ = ["BINARY", "UNARY", "UNARY_WITH_ATTRS", "NoAttrs", "broadcast_shapes", "erf"]
