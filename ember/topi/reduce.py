"""Reductions: reduce_sum / mean / max / min / prod / sum_square / l1 / l2 /
log_sum_exp over a set of axes (keepdims or not), and argmax / argmin.

`reduce_over` is the one helper every multi-stage op (softmax, norms) uses too: a stage
reducing some axes of a tensor, with an optional transform of each element read. An
argmax is not one reduction (a maximum and its position need a pair combiner), so it is
two: the maximum, then the least index holding it (a min-reduction over a select).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import ArgReduceAttrs, ReduceAttrs
from ember.graph.ops.reduce import reduced_axes
from ember.te import (
    Expr,
    Tensor,
    call,
    cast,
    compute,
    equal,
    logical_and,
    reduce_axis,
    reduce_max,
    reduce_min,
    reduce_prod,
    reduce_sum,
    select,
)
from ember.te.expr import INDEX_DTYPE, Reduce
from ember.te.tensor import IterVar
from ember.topi.common import REDUCE, Declaration, axis_names, is_float, typed
from ember.topi.elementwise import absolute

Combine = Callable[[Expr, Sequence[IterVar]], Reduce]
# Transform of an element read during a reduction: (value, its index in the input).
ElementFn = Callable[[Expr, list[Expr]], Expr]


def reduced_index(index: Sequence[Expr], axes: Sequence[int], keepdims: bool) -> tuple:
    """The position in a reduced tensor of the input element at `index`."""
    if keepdims:
        return tuple(0 if a in axes else i for a, i in enumerate(index))
    return tuple(i for a, i in enumerate(index) if a not in axes)


def reduce_over(
    name: str,
    x: Tensor,
    axes: Sequence[int],
    combine: Combine,
    keepdims: bool = False,
    element: ElementFn | None = None,
    prefix: str = "ax",
    reduce_names: Sequence[str] | None = None,
) -> Tensor:
    """`name(out...) <combine>= element(x[...], index)` over `axes` of `x`."""
    reduced = sorted(axes)
    names = reduce_names or [f"k{m}" for m in range(len(reduced))]
    raxes = [reduce_axis(x.shape[a], n) for a, n in zip(reduced, names, strict=True)]
    shape = [1 if a in reduced else d for a, d in enumerate(x.shape)]
    if not keepdims:
        shape = [d for a, d in enumerate(x.shape) if a not in reduced]

    def body(*out: Expr) -> Expr:
        kept = iter(out)
        taps = iter(raxes)
        index: list[Expr] = []
        for a in range(x.ndim):
            if a in reduced:
                index.append(next(taps).var)
                if keepdims:
                    next(kept)
            else:
                index.append(next(kept))
        value = x[tuple(index)]
        return combine(value if element is None else element(value, index), raxes)

    return compute(shape, body, name, REDUCE, axis_names(len(shape), prefix))


def _to_float(x: Expr) -> Expr:
    return x if is_float(x.dtype) else cast("float64", x)


def _square(x: Expr) -> Expr:
    return x * x


def _finite_or_zero(value: Expr) -> Expr:
    """The shift of a log-sum-exp: the maximum where finite, else 0 (so an all -inf
    slice gives log(0) = -inf, as the reference)."""
    infinity = typed(math.inf, value.dtype)
    return select(logical_and(value > -infinity, value < infinity), value, typed(0, value.dtype))


def _reduction(op: str) -> Declaration:
    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        assert isinstance(attrs, ReduceAttrs)
        x = inputs[0]
        axes = reduced_axes(attrs, x.ndim)
        keep = attrs.keepdims
        name = f"T_{op}"
        simple: dict[str, tuple[Combine, ElementFn | None]] = {
            "reduce_sum": (reduce_sum, None),
            "reduce_max": (reduce_max, None),
            "reduce_min": (reduce_min, None),
            "reduce_prod": (reduce_prod, None),
            "reduce_sum_square": (reduce_sum, lambda v, i: _square(v)),
            "reduce_l1": (reduce_sum, lambda v, i: absolute(v)),
        }
        if op in simple:
            combine, element = simple[op]
            return [reduce_over(name, x, axes, combine, keep, element)]
        count = math.prod(x.shape[a] for a in axes)
        if op == "reduce_mean":
            sums = reduce_over(f"{name}_sum", x, axes, reduce_sum, keep)
            return [_finish(name, sums, lambda s: _to_float(s) / typed(count, _to_float(s).dtype))]
        if op == "reduce_l2":
            squares = reduce_over(f"{name}_sum", x, axes, reduce_sum, keep, lambda v, i: v * v)
            return [_finish(name, squares, lambda s: call("sqrt", _to_float(s)))]
        assert op == "reduce_log_sum_exp"
        return [_log_sum_exp(name, x, axes, keep)]

    return declare


def _finish(name: str, stage: Tensor, fn: Callable[[Expr], Expr]) -> Tensor:
    """`name(ax...) = fn(stage[ax...])`, cast back to the stage's dtype."""
    return compute(
        stage.shape,
        lambda *ax: cast(stage.dtype, fn(stage[ax])),
        name,
        "elemwise",
        axis_names(stage.ndim),
    )


def _log_sum_exp(name: str, x: Tensor, axes: Sequence[int], keep: bool) -> Tensor:
    """log(sum(exp(x - shift))) + shift, shift the (finite) maximum."""
    maximum = reduce_over(f"{name}_max", x, axes, reduce_max, True)

    def shift(index: Sequence[Expr]) -> Expr:
        return _finite_or_zero(_to_float(maximum[reduced_index(index, axes, True)]))

    exp_sum = reduce_over(
        f"{name}_sum", x, axes, reduce_sum, keep, lambda v, i: call("exp", _to_float(v) - shift(i))
    )

    def element(*out: Expr) -> Expr:
        # The output's position in the (keepdims) maximum.
        index: list[Expr] = []
        kept = iter(out)
        for a in range(x.ndim):
            if a in axes:
                index.append(typed(0, INDEX_DTYPE))
                if keep:
                    next(kept)
            else:
                index.append(next(kept))
        return cast(x.dtype, call("log", exp_sum[out]) + shift(index))

    return compute(exp_sum.shape, element, name, "elemwise", axis_names(exp_sum.ndim))


def _arg_reduction(op: str) -> Declaration:
    """`T_argmax_max` holds the maximum; `T_argmax` the least index holding it (the
    greatest with select_last_index)."""

    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        assert isinstance(attrs, ArgReduceAttrs)
        x, axis = inputs[0], attrs.axis
        best = reduce_max if op == "argmax" else reduce_min
        extreme = reduce_over(f"T_{op}_{op[3:]}", x, [axis], best, True, reduce_names=["k"])
        extent = x.shape[axis]

        def position(value: Expr, index: list[Expr]) -> Expr:
            holds = equal(value, extreme[reduced_index(index, [axis], True)])
            missing = -1 if attrs.select_last_index else extent
            return select(holds, index[axis], typed(missing, INDEX_DTYPE))

        pick = reduce_max if attrs.select_last_index else reduce_min
        keep = attrs.keepdims
        return [reduce_over(f"T_{op}", x, [axis], pick, keep, position, reduce_names=["k"])]

    return declare


DECLARATIONS: dict[str, Declaration] = {
    **{
        op: _reduction(op)
        for op in (
            "reduce_sum",
            "reduce_mean",
            "reduce_max",
            "reduce_min",
            "reduce_prod",
            "reduce_sum_square",
            "reduce_l1",
            "reduce_l2",
            "reduce_log_sum_exp",
        )
    },
    "argmax": _arg_reduction("argmax"),
    "argmin": _arg_reduction("argmin"),
}
