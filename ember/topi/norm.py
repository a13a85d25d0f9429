"""Softmax, log_softmax and the normalisations (batch, layer, instance norm; LRN).

Softmax is the seed's four stages:

    T_softmax_maxelem(i0) max= placeholder[i0, k]
    T_softmax_exp(i0, i1) = exp((placeholder[i0, i1] - T_softmax_maxelem[i0]))
    T_softmax_expsum(i0) += T_softmax_exp[i0, k]
    T_softmax_norm(i0, i1) = (T_softmax_exp[i0, i1]/T_softmax_expsum[i0])

Layer and instance norm reduce twice, a sum (for the mean) and then the sum of squared
deviations from that mean (two passes, as the reference computes the variance), and
normalise in a final elementwise stage.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import (
    AxisAttrs,
    BatchNormAttrs,
    InstanceNormAttrs,
    LayerNormAttrs,
    LrnAttrs,
)
from ember.graph.ops.layout import parse_data_layout
from ember.graph.ops.nn import lrn_window
from ember.te import Expr, Tensor, call, compute, reduce_axis, reduce_max, reduce_sum, select
from ember.topi.common import BROADCAST, Declaration, all_of, axis_names, broadcast_read, typed
from ember.topi.reduce import reduce_over, reduced_index


def _softmax(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, AxisAttrs)
    x, axis = inputs[0], attrs.axis
    names = axis_names(x.ndim, "i")

    def at(index: Sequence[Expr]) -> tuple:
        return reduced_index(index, [axis], False)

    maxelem = reduce_over(
        "T_softmax_maxelem", x, [axis], reduce_max, prefix="i", reduce_names=["k"]
    )
    exp = compute(
        x.shape, lambda *i: call("exp", x[i] - maxelem[at(i)]), "T_softmax_exp", BROADCAST, names
    )
    expsum = reduce_over(
        "T_softmax_expsum", exp, [axis], reduce_sum, prefix="i", reduce_names=["k"]
    )
    norm = compute(x.shape, lambda *i: exp[i] / expsum[at(i)], "T_softmax_norm", BROADCAST, names)
    return [norm]


def _log_softmax(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    """(x - max) - log(sum(exp(x - max)))."""
    assert isinstance(attrs, AxisAttrs)
    x, axis = inputs[0], attrs.axis

    def at(index: Sequence[Expr]) -> tuple:
        return reduced_index(index, [axis], False)

    maxelem = reduce_over(
        "T_log_softmax_maxelem", x, [axis], reduce_max, prefix="i", reduce_names=["k"]
    )
    expsum = reduce_over(
        "T_log_softmax_expsum",
        x,
        [axis],
        reduce_sum,
        element=lambda v, i: call("exp", v - maxelem[at(i)]),
        prefix="i",
        reduce_names=["k"],
    )

    def element(*i: Expr) -> Expr:
        return (x[i] - maxelem[at(i)]) - call("log", expsum[at(i)])

    names = axis_names(x.ndim, "i")
    return [compute(x.shape, element, "T_log_softmax_norm", BROADCAST, names)]


def _normalise(name: str, x: Tensor, axes: Sequence[int]) -> tuple[Tensor, Tensor, int]:
    """The sum and the sum of squared deviations over `axes`, and the element count."""
    count = math.prod(x.shape[a] for a in axes)
    sums = reduce_over(f"{name}_sum", x, axes, reduce_sum)

    def deviation(value: Expr, index: list[Expr]) -> Expr:
        centred = value - sums[reduced_index(index, axes, False)] / typed(count, x.dtype)
        return centred * centred

    squares = reduce_over(f"{name}_sqsum", x, axes, reduce_sum, element=deviation)
    return sums, squares, count


def _standardise(
    x: Tensor,
    sums: Tensor,
    squares: Tensor,
    count: int,
    epsilon: float,
    index: Sequence[Expr],
    axes: Sequence[int],
) -> Expr:
    """(x - mean) / sqrt(variance + epsilon) at `index` of x."""
    at = reduced_index(index, axes, False)
    size = typed(count, x.dtype)
    mean = sums[at] / size
    deviation = call("sqrt", squares[at] / size + typed(epsilon, x.dtype))
    return (x[tuple(index)] - mean) / deviation


def _layer_norm(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, LayerNormAttrs)
    x, scale, bias = inputs
    axes = list(range(attrs.axis, x.ndim))
    sums, squares, count = _normalise("T_layer_norm", x, axes)

    def element(*ax: Expr) -> Expr:
        value = _standardise(x, sums, squares, count, attrs.epsilon, ax, axes)
        return value * broadcast_read(scale, x.shape, ax) + broadcast_read(bias, x.shape, ax)

    return [compute(x.shape, element, "T_layer_norm", BROADCAST, axis_names(x.ndim))]


def _instance_norm(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, InstanceNormAttrs)
    x, scale, bias = inputs
    layout = parse_data_layout(attrs.layout, "instance_norm", x.ndim)
    axes = list(layout.spatial_axes)
    sums, squares, count = _normalise("T_instance_norm", x, axes)

    def element(*ax: Expr) -> Expr:
        value = _standardise(x, sums, squares, count, attrs.epsilon, ax, axes)
        channel = ax[layout.channel_axis]
        return value * scale[channel] + bias[channel]

    return [compute(x.shape, element, "T_instance_norm", BROADCAST, axis_names(x.ndim))]


def _batch_norm(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    """Inference batch norm: one stage, (x - mean) / sqrt(var + eps) * scale + bias."""
    assert isinstance(attrs, BatchNormAttrs)
    x, scale, bias, mean, var = inputs

    def element(*ax: Expr) -> Expr:
        c = ax[attrs.axis]
        deviation = call("sqrt", var[c] + typed(attrs.epsilon, x.dtype))
        return (x[ax] - mean[c]) / deviation * scale[c] + bias[c]

    return [compute(x.shape, element, "T_batch_norm", BROADCAST, axis_names(x.ndim))]


def _lrn(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    """x / (bias + alpha / size * sum of squares of nearby channels) ** beta."""
    assert isinstance(attrs, LrnAttrs)
    x = inputs[0]
    channels = x.shape[1]
    before, after = lrn_window(attrs.size, channels)
    window = reduce_axis(before + after + 1, "rc")
    names = axis_names(x.ndim)

    def square_sum(*ax: Expr) -> Expr:
        channel = ax[1] + window.var - before if before else ax[1] + window.var
        conditions = []
        if before:
            conditions.append(channel >= 0)
        if after:
            conditions.append(channel < channels)
        value = x[(ax[0], channel, *ax[2:])]
        guard = all_of(conditions)
        square = value * value
        return reduce_sum(
            square if guard is None else select(guard, square, typed(0, x.dtype)), window
        )

    squares = compute(x.shape, square_sum, "T_lrn_sqsum", "comm_reduce", names)

    def element(*ax: Expr) -> Expr:
        scale = typed(attrs.alpha / attrs.size, x.dtype)
        base = typed(attrs.bias, x.dtype) + scale * squares[ax]
        return x[ax] / call("pow", base, typed(attrs.beta, x.dtype))

    return [compute(x.shape, element, "T_lrn", BROADCAST, names)]


DECLARATIONS: dict[str, Declaration] = {
    "softmax": _softmax,
    "log_softmax": _log_softmax,
    "layer_norm": _layer_norm,
    "instance_norm": _instance_norm,
    "batch_norm": _batch_norm,
    "lrn": _lrn,
}
