"""Reductions: reduce_* over a set of axes, argmax / argmin, and topk.

Floating-point sums accumulate in float64 and round once at the end, so the reference
is the exactly rounded result (up to float64 error) that compiled kernels and ONNX
Runtime are compared against with a tolerance.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import TensorType
from ember.graph.ops.attrs import ArgReduceAttrs, ReduceAttrs, TopKAttrs
from ember.graph.ops.registry import OpDef, OpPattern, ReferenceFn, register_op
from ember.graph.ops.tensor import check_axis


def reduced_axes(attrs: ReduceAttrs, ndim: int) -> tuple[int, ...]:
    """The axes a reduce_* node reduces: `attrs.axes`, or all axes when it is empty."""
    return tuple(attrs.axes) if attrs.axes else tuple(range(ndim))


def input_elements(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: object
) -> int:
    """Cost of a reduction: one operation per element read."""
    return inputs[0].size


def _accumulator(x: np.ndarray) -> np.ndarray:
    # float16/float32 sums in float64: one rounding at the end instead of one per term.
    return x.astype(np.float64) if x.dtype.kind == "f" else x


def _lowest(dtype: np.dtype) -> float:
    """Identity of max: what ONNX returns when reducing an empty set."""
    if dtype.kind == "f":
        return -np.inf
    if dtype.kind == "b":
        return False
    return int(np.iinfo(dtype).min)


def _highest(dtype: np.dtype) -> float:
    """Identity of min."""
    if dtype.kind == "f":
        return np.inf
    if dtype.kind == "b":
        return True
    return int(np.iinfo(dtype).max)


def _log_sum_exp(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # Shift by the maximum so exp cannot overflow; an all -inf (or empty) slice has no
    # finite maximum, and shifting by 0 there gives log(0) = -inf as it should.
    shift = np.max(x, axis=axes, keepdims=True, initial=-np.inf)
    shift = np.where(np.isfinite(shift), shift, 0.0)
    total = np.sum(np.exp(x - shift), axis=axes, keepdims=True)
    with np.errstate(divide="ignore"):
        result = np.log(total) + shift
    return result if keepdims else np.squeeze(result, axis=axes)


def _mean(x: np.ndarray, axes: tuple[int, ...], keepdims: bool) -> np.ndarray:
    # The mean of nothing is 0 here, as in ONNX Runtime (ONNX leaves it undefined;
    # NumPy says NaN with a warning).
    total = np.sum(_accumulator(x), axis=axes, keepdims=keepdims)
    count = math.prod(x.shape[axis] for axis in axes)
    return total / count if count else total


Reducer = Callable[[np.ndarray, tuple[int, ...], bool], np.ndarray]

# name -> reference of (input, axes, keepdims); the input is cast by `_accumulator`
# first except for max and min, which are exact in any dtype, and log_sum_exp, whose
# exponentials need floating point whatever the input's dtype.
REDUCERS: dict[str, Reducer] = {
    "reduce_sum": lambda x, axes, keep: np.sum(_accumulator(x), axis=axes, keepdims=keep),
    "reduce_mean": _mean,
    "reduce_max": lambda x, axes, keep: np.max(
        x, axis=axes, keepdims=keep, initial=_lowest(x.dtype)
    ),
    "reduce_min": lambda x, axes, keep: np.min(
        x, axis=axes, keepdims=keep, initial=_highest(x.dtype)
    ),
    "reduce_prod": lambda x, axes, keep: np.prod(_accumulator(x), axis=axes, keepdims=keep),
    "reduce_sum_square": lambda x, axes, keep: np.sum(
        np.square(_accumulator(x)), axis=axes, keepdims=keep
    ),
    "reduce_l1": lambda x, axes, keep: np.sum(np.abs(_accumulator(x)), axis=axes, keepdims=keep),
    "reduce_l2": lambda x, axes, keep: np.sqrt(
        np.sum(np.square(_accumulator(x)), axis=axes, keepdims=keep)
    ),
    "reduce_log_sum_exp": lambda x, axes, keep: _log_sum_exp(x.astype(np.float64), axes, keep),
}


def _reduce_infer(name: str) -> Callable[[Sequence[TensorType], ReduceAttrs], tuple[TensorType]]:
    def infer(inputs: Sequence[TensorType], attrs: ReduceAttrs) -> tuple[TensorType]:
        (data,) = inputs
        for axis in attrs.axes:
            check_axis(name, axis, data.ndim)
        if len(set(attrs.axes)) != len(attrs.axes):
            raise ShapeError(f"{name}: axes {list(attrs.axes)} repeat an axis")
        axes = reduced_axes(attrs, data.ndim)
        if attrs.keepdims:
            shape = tuple(1 if i in axes else d for i, d in enumerate(data.shape))
        else:
            shape = tuple(d for i, d in enumerate(data.shape) if i not in axes)
        return (TensorType(shape, data.dtype),)

    return infer


def _reduce_reference(reducer: Reducer) -> ReferenceFn:
    def reference(xs: Sequence[np.ndarray], attrs: ReduceAttrs) -> tuple[np.ndarray, ...]:
        data = xs[0]
        result = reducer(data, reduced_axes(attrs, data.ndim), attrs.keepdims)
        return (np.asarray(result).astype(data.dtype),)

    return reference


# -- argmax, argmin --------------------------------------------------------------


def _arg_infer(name: str) -> Callable[[Sequence[TensorType], ArgReduceAttrs], tuple[TensorType]]:
    def infer(inputs: Sequence[TensorType], attrs: ArgReduceAttrs) -> tuple[TensorType]:
        (data,) = inputs
        check_axis(name, attrs.axis, data.ndim)
        if data.shape[attrs.axis] == 0:
            raise ShapeError(f"{name}: axis {attrs.axis} of {data} is empty; nothing to pick")
        shape = list(data.shape)
        if attrs.keepdims:
            shape[attrs.axis] = 1
        else:
            del shape[attrs.axis]
        return (TensorType(tuple(shape), "int64"),)

    return infer


def _arg_reference(pick: Callable[..., np.ndarray]) -> ReferenceFn:
    def reference(xs: Sequence[np.ndarray], attrs: ArgReduceAttrs) -> tuple[np.ndarray, ...]:
        data, axis = xs[0], attrs.axis
        if attrs.select_last_index:
            # NumPy returns the first extreme; on the reversed axis that is the last one.
            last = data.shape[axis] - 1
            index = last - pick(np.flip(data, axis), axis=axis)
        else:
            index = pick(data, axis=axis)
        if attrs.keepdims:
            index = np.expand_dims(index, axis)
        return (np.asarray(index, dtype=np.int64),)

    return reference


# -- topk ------------------------------------------------------------------------


def _topk_infer(inputs: Sequence[TensorType], attrs: TopKAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    check_axis("topk", attrs.axis, data.ndim)
    extent = data.shape[attrs.axis]
    if not 0 <= attrs.k <= extent:
        raise ShapeError(
            f"topk: k={attrs.k} must be in 0..{extent} for axis {attrs.axis} of {data}"
        )
    shape = list(data.shape)
    shape[attrs.axis] = attrs.k
    return (TensorType(tuple(shape), data.dtype), TensorType(tuple(shape), "int64"))


def _topk_order(data: np.ndarray, axis: int, largest: bool) -> np.ndarray:
    """Indices that sort `axis` (descending if `largest`), ties by lower index first."""
    if not largest:
        return np.argsort(data, axis=axis, kind="stable")
    # A stable ascending sort of the reversed axis, read backwards, is descending with
    # equal values in increasing original index order (negating would overflow ints).
    reversed_order = np.argsort(np.flip(data, axis), axis=axis, kind="stable")
    return np.flip(data.shape[axis] - 1 - reversed_order, axis)


def _topk_reference(xs: Sequence[np.ndarray], attrs: TopKAttrs) -> tuple[np.ndarray, ...]:
    data = xs[0]
    # Always sorted: ONNX leaves the order unspecified for sorted=0, so sorted is valid.
    order = _topk_order(data, attrs.axis, attrs.largest)
    indices = np.take(order, np.arange(attrs.k), axis=attrs.axis)
    values = np.take_along_axis(data, indices, axis=attrs.axis)
    return values, indices.astype(np.int64)


def _register_all() -> None:
    for name, reducer in REDUCERS.items():
        register_op(
            OpDef(
                name,
                OpPattern.REDUCTION,
                _reduce_infer(name),
                _reduce_reference(reducer),
                attrs_type=ReduceAttrs,
                macs=input_elements,
                doc=f"{name} over `axes` (all axes when empty), keeping them as 1 if keepdims.",
            )
        )
    for name, pick in (("argmax", np.argmax), ("argmin", np.argmin)):
        register_op(
            OpDef(
                name,
                OpPattern.REDUCTION,
                _arg_infer(name),
                _arg_reference(pick),
                attrs_type=ArgReduceAttrs,
                macs=input_elements,
                doc=f"int64 index of the {name[3:]}imum along `axis` (first one, or last).",
            )
        )
    register_op(
        OpDef(
            "topk",
            OpPattern.OPAQUE,
            _topk_infer,
            _topk_reference,
            attrs_type=TopKAttrs,
            macs=input_elements,
            doc="The k largest (or smallest) entries along `axis` and their int64 indices.",
        )
    )


_register_all()

__all__ = ["REDUCERS", "input_elements", "reduced_axes"]
