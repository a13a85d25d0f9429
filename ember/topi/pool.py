"""Pooling: max / average over N-d windows (strides, dilations, padding, ceil mode,
count_include_pad; channels-first or -last) and the global pools.

    pool_max(ax0, ax1, ax2, ax3) max= pad_temp[ax0, ((ax1*2) + rv0), ((ax2*2) + rv1), ax3]
    pool_avg(ax0, ax1, ax2, ax3) = (pool_sum[ax0, ax1, ax2, ax3]/<taps counted>)

Padding (including what ceil mode adds at the end) is a `pad_temp` stage filled with
the lowest value for max and 0 for the sum, present only when some window reaches
outside the input. The average divides by the taps that the reference counts: those
on the input, plus those on the declared padding with count_include_pad; the count is
a constant when every window sees the same number, else an index expression.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import LayoutAttrs, PoolAttrs
from ember.graph.ops.layout import DataLayout, parse_data_layout
from ember.te import (
    Expr,
    Tensor,
    cast,
    compute,
    maximum,
    minimum,
    reduce_axis,
    reduce_max,
    reduce_sum,
)
from ember.topi.common import (
    Declaration,
    axis_names,
    lowest,
    pad_stage,
    scaled,
    typed,
)


def _padding(
    attrs: PoolAttrs, sizes: Sequence[int], out_sizes: Sequence[int]
) -> tuple[list[int], list[int]]:
    """(before, after) per spatial axis: the declared begins, and at the end what the
    last window actually reaches past the input (ceil mode may reach further than the
    declared end padding; windows may also stop short of it)."""
    rank = len(sizes)
    before = list(attrs.padding[:rank])
    after = []
    for axis in range(rank):
        reach = (out_sizes[axis] - 1) * attrs.strides[axis]
        reach += attrs.dilations[axis] * (attrs.kernel[axis] - 1) + 1
        after.append(max(0, reach - before[axis] - sizes[axis]))
    return before, after


def _spatial(layout: DataLayout, shape: Sequence[int]) -> list[int]:
    return [shape[axis] for axis in layout.spatial_axes]


def _pool_sum_or_max(
    data: Tensor, attrs: PoolAttrs, layout: DataLayout, out_shape: Sequence[int], is_max: bool
) -> Tensor:
    sizes = _spatial(layout, data.shape)
    before, after = _padding(attrs, sizes, _spatial(layout, out_shape))
    source = data
    if any(before) or any(after):
        full_before, full_after = [0] * data.ndim, [0] * data.ndim
        for m, axis in enumerate(layout.spatial_axes):
            full_before[axis], full_after[axis] = before[m], after[m]
        fill = lowest(data.dtype) if is_max else typed(0, data.dtype)
        source = pad_stage(data, full_before, full_after, fill)
    taps = [reduce_axis(k, f"rv{m}") for m, k in enumerate(attrs.kernel)]

    def element(*out: Expr) -> Expr:
        index = list(out)
        for m, axis in enumerate(layout.spatial_axes):
            stride, dilation = attrs.strides[m], attrs.dilations[m]
            index[axis] = scaled(out[axis], stride) + scaled(taps[m].var, dilation)
        read = source[tuple(index)]
        return reduce_max(read, taps) if is_max else reduce_sum(read, taps)

    name = "pool_max" if is_max else "pool_sum"
    return compute(out_shape, element, name, name, axis_names(len(out_shape)))


# Up to this many (window, tap) pairs, `_taps_counted` counts every window's taps to find
# a constant count; beyond (absurd shapes), it computes the count per window.
_MAX_COUNTED_TAPS = 1 << 16


def _taps_counted(
    attrs: PoolAttrs, axis: int, size: int, out_size: int, position: Expr
) -> tuple[int, Expr | None]:
    """How many window taps along spatial `axis` the average divides by: a constant
    (with None) when the same for every window, else (0, an index expression)."""
    kernel, stride, dilation = attrs.kernel[axis], attrs.strides[axis], attrs.dilations[axis]
    begin, end = attrs.padding[axis], attrs.padding[axis + len(attrs.kernel)]
    # The counted region, in padded coordinates.
    low, high = (0, begin + size + end) if attrs.count_include_pad else (begin, begin + size)
    always_positive = False  # whether no window lies wholly outside the counted region
    if out_size * kernel <= _MAX_COUNTED_TAPS:
        counts = {
            sum(1 for t in range(kernel) if low <= o * stride + t * dilation < high)
            for o in range(out_size)
        }
        if len(counts) == 1:
            return counts.pop(), None
        always_positive = min(counts) > 0
    # Taps t in [0, kernel) with low <= start + t * dilation < high, start = o * stride:
    # from ceil((low - start) / dilation) to floor((high - 1 - start) / dilation).
    start = scaled(position, stride)
    first = last = None
    if low > 0:
        first = maximum(_floor_div((low + dilation - 1) - start, dilation), 0)
    if (out_size - 1) * stride + (kernel - 1) * dilation >= high:
        last = minimum(_floor_div((high - 1) - start, dilation), kernel - 1)
    if first is None and last is None:
        return kernel, None  # every window lies wholly inside
    if first is None:
        assert last is not None
        count = last + 1
    else:
        count = kernel - first if last is None else last - first + 1
    return 0, count if always_positive else maximum(count, 0)


def _floor_div(value: Expr, divisor: int) -> Expr:
    return value if divisor == 1 else value // divisor


def _avg_pool(
    data: Tensor, attrs: PoolAttrs, layout: DataLayout, out_shape: Sequence[int]
) -> Tensor:
    sums = _pool_sum_or_max(data, attrs, layout, out_shape, is_max=False)
    sizes = _spatial(layout, data.shape)
    out_sizes = _spatial(layout, out_shape)

    def element(*out: Expr) -> Expr:
        constant = 1
        varying: list[Expr] = []
        for m, axis in enumerate(layout.spatial_axes):
            count, expr = _taps_counted(attrs, m, sizes[m], out_sizes[m], out[axis])
            if expr is None:
                constant *= count
            else:
                varying.append(expr)
        divisor: Expr = typed(constant, data.dtype)
        if varying:
            product = math.prod(varying[1:], start=varying[0])
            divisor = cast(data.dtype, product if constant == 1 else product * constant)
        return sums[out] / divisor

    return compute(out_shape, element, "pool_avg", "pool_avg", axis_names(len(out_shape)))


def _window_pool(is_max: bool) -> Declaration:
    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        assert isinstance(attrs, PoolAttrs)
        data = inputs[0]
        layout = parse_data_layout(attrs.layout, "pool", data.ndim)
        if is_max:
            return [_pool_sum_or_max(data, attrs, layout, outputs[0].shape, is_max=True)]
        return [_avg_pool(data, attrs, layout, outputs[0].shape)]

    return declare


def _global_pool(is_max: bool) -> Declaration:
    """`adaptive_pool_sum(ax...) += x[ax0, rv0, rv1, ax3]` (then `adaptive_pool_avg`
    divides by the window size), or `adaptive_pool_max(ax...) max= ...`."""

    def declare(
        inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
    ) -> list[Tensor]:
        assert isinstance(attrs, LayoutAttrs)
        data = inputs[0]
        layout = parse_data_layout(attrs.layout, "global pool", data.ndim)
        sizes = _spatial(layout, data.shape)
        taps = [reduce_axis(size, f"rv{m}") for m, size in enumerate(sizes)]
        shape = outputs[0].shape
        names = axis_names(len(shape))

        def element(*out: Expr) -> Expr:
            index = list(out)
            for m, axis in enumerate(layout.spatial_axes):
                index[axis] = taps[m].var
            read = data[tuple(index)]
            return reduce_max(read, taps) if is_max else reduce_sum(read, taps)

        if is_max:
            return [compute(shape, element, "adaptive_pool_max", "adaptive_pool_max", names)]
        sums = compute(shape, element, "adaptive_pool_sum", "adaptive_pool_sum", names)
        window = typed(math.prod(sizes), data.dtype)
        average = compute(
            shape, lambda *out: sums[out] / window, "adaptive_pool_avg", "elemwise", names
        )
        return [average]

    return declare


DECLARATIONS: dict[str, Declaration] = {
    "max_pool": _window_pool(is_max=True),
    "avg_pool": _window_pool(is_max=False),
    "global_max_pool": _global_pool(is_max=True),
    "global_avg_pool": _global_pool(is_max=False),
}
