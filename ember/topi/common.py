"""Helpers shared by the compute declarations: axis names, typed constants, broadcast
reads, padding stages and index arithmetic that omits trivial terms (so `yy*1 + 0`
prints as `yy`, as users know it from TVM's printouts)."""

from __future__ import annotations

import functools
from collections.abc import Callable, Sequence
from typing import TypeAlias

import numpy as np

from ember.graph.ir import FLOAT_DTYPES, Attrs, TensorType
from ember.te import (
    Const,
    Expr,
    Tensor,
    compute,
    const,
    logical_and,
    maximum,
    minimum,
    select,
)

# A declaration: (input tensors, the node's attrs, its inferred output types) -> one
# tensor per output.
Declaration: TypeAlias = Callable[[Sequence[Tensor], Attrs, Sequence[TensorType]], list[Tensor]]

# Stage tags: how a stage computes, for the default schedules and the search's rules.
ELEMWISE = "elemwise"  # output[i] from input[i] of the same shape
BROADCAST = "broadcast"  # elementwise with size-1 (or missing) input axes broadcast
INJECTIVE = "injective"  # each output element reads a few input elements
PAD = "injective,pad"  # a padded copy of a tensor (a lazy select at the borders)
REDUCE = "comm_reduce"  # a commutative reduction (sum, max, min, prod)
WINOGRAD_INPUT = "injective,winograd_input"  # a Winograd conv's input transform
WINOGRAD_OUTPUT = "injective,winograd_output"  # its output transform


def axis_names(rank: int, prefix: str = "ax") -> list[str]:
    return [f"{prefix}{k}" for k in range(rank)]


def is_float(dtype: str) -> bool:
    return dtype in FLOAT_DTYPES


def typed(value: float | int | bool, dtype: str) -> Const:
    """A constant of `dtype` (ints truncated toward zero, like NumPy's astype)."""
    if dtype == "bool":
        return const(bool(value), dtype)
    if is_float(dtype):
        return const(float(value), dtype)
    return const(int(value), dtype)


def lowest(dtype: str) -> Const:
    """The identity of max in `dtype`: what padding of a max pool holds."""
    if is_float(dtype):
        return const(float("-inf"), dtype)
    if dtype == "bool":
        return const(False, dtype)
    return const(int(np.iinfo(dtype).min), dtype)


def all_of(conditions: Sequence[Expr]) -> Expr | None:
    """`c0 && c1 && ...` folded left, as the seed prints it; None for no condition."""
    if not conditions:
        return None
    return functools.reduce(logical_and, conditions)


def scaled(index: Expr, factor: int) -> Expr:
    """`index * factor`, or `index` itself for a factor of 1."""
    return index if factor == 1 else index * factor


def offset(index: Expr, amount: int) -> Expr:
    """`index + amount`, without a zero term."""
    if amount == 0:
        return index
    return index + amount if amount > 0 else index - (-amount)


def clamp(index: Expr, low: int, high: int) -> Expr:
    return minimum(maximum(index, low), high)


def broadcast_read(tensor: Tensor, out_shape: Sequence[int], out_vars: Sequence[Expr]) -> Expr:
    """Read `tensor` at the output position `out_vars` under NumPy broadcasting:
    axes are aligned from the right, and an axis of length 1 where the output is longer
    reads index 0 (`placeholder[ax0, 0, 0, ax3]`)."""
    lead = len(out_shape) - tensor.ndim
    indices: list[Expr | int] = []
    for axis, extent in enumerate(tensor.shape):
        out_axis = lead + axis
        indices.append(0 if extent == 1 and out_shape[out_axis] != 1 else out_vars[out_axis])
    return tensor[tuple(indices)]


def pad_stage(
    data: Tensor,
    before: Sequence[int],
    after: Sequence[int],
    fill: Expr,
    name: str = "pad_temp",
) -> Tensor:
    """`data` padded by `before` / `after` elements per axis with `fill`: a lazy
    select that reads `data` only inside it. Without padding it is a plain copy (conv
    keeps that stage, as TVM does; the schedule inlines it)."""
    shape = [b + n + a for b, n, a in zip(before, data.shape, after, strict=True)]

    def element(*index: Expr) -> Expr:
        conditions: list[Expr] = []
        source: list[Expr] = []
        for axis, (begin, end, extent) in enumerate(zip(before, after, data.shape, strict=True)):
            if begin > 0:
                conditions.append(index[axis] >= begin)
            if end > 0:
                conditions.append(index[axis] < begin + extent)
            source.append(offset(index[axis], -begin))
        condition = all_of(conditions)
        read = data[tuple(source)]
        return read if condition is None else select(condition, read, fill)

    return compute(shape, element, name=name, tag=PAD, axis_names=axis_names(len(shape), "i"))
