"""`resize` (nearest, linear, cubic) with the exact index arithmetic of the reference.

The reference evaluates each output index's source coordinate exactly, as a rational
number (see `ember.graph.ops.resize`). Every coordinate transform is affine in the
output index x, so the coordinate is (A*x + B) / D for integers A, B and D > 0, and
all the roundings the modes need are floor divisions of integers:

- nearest: round_prefer_floor is floor((2N + D - 1) / 2D), round_prefer_ceil is
  floor((2N + D) / 2D), floor is floor(N / D), ceil is floor((N + D - 1) / D);
- linear: the coordinate clamped to [0, size - 1], its floor and its fraction;
- cubic: the floor, the fraction and Keys' weights for the four taps around it.

Interpolation is separable, so an output element sums, over every combination of the
resized axes' taps, the product of their weights times the input there. Clamps are
emitted only where some index would leave the input.
"""

from __future__ import annotations

import itertools
import math
from collections.abc import Sequence
from dataclasses import dataclass
from fractions import Fraction

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.attrs import ResizeAttrs
from ember.graph.ops.resize import source_coordinates
from ember.te import Expr, Tensor, cast, compute, logical_and, maximum, minimum, select
from ember.te.expr import INDEX_DTYPE
from ember.topi.common import INJECTIVE, Declaration, axis_names, typed


@dataclass(frozen=True, slots=True)
class _Affine:
    """floor((a * x + b) / d) for output index x in [0, count), d > 0."""

    a: int
    b: int
    d: int
    count: int

    def values(self) -> list[int]:
        return [(self.a * x + self.b) // self.d for x in range(self.count)]

    def expr(self, x: Expr) -> Expr:
        numerator = x if self.a == 1 else x * self.a
        if self.a == 0:
            numerator = typed(self.b, INDEX_DTYPE)
        elif self.b:
            numerator = numerator + self.b
        return numerator if self.d == 1 else numerator // self.d


def _coordinate(coords: list[Fraction]) -> tuple[int, int, int]:
    """(A, B, D) with coords[x] == (A*x + B) / D for every x."""
    start = coords[0]
    slope = coords[1] - coords[0] if len(coords) > 1 else Fraction(0)
    assert all(c == start + x * slope for x, c in enumerate(coords)), "not affine"
    denominator = math.lcm(start.denominator, slope.denominator)
    return int(slope * denominator), int(start * denominator), denominator


def _clamped(index: Expr, values: Sequence[int], size: int) -> Expr:
    """`index` limited to [0, size - 1], with only the bounds that `values` cross."""
    if min(values) < 0:
        index = maximum(index, 0)
    if max(values) > size - 1:
        index = minimum(index, size - 1)
    return index


# Taps of one axis: (input index, weight or None for weight 1).
Tap = tuple[Expr, Expr | None]


def _nearest(a: int, b: int, d: int, x: Expr, size: int, count: int, mode: str) -> list[Tap]:
    rounding = {
        "round_prefer_floor": _Affine(2 * a, 2 * b + d - 1, 2 * d, count),
        "round_prefer_ceil": _Affine(2 * a, 2 * b + d, 2 * d, count),
        "floor": _Affine(a, b, d, count),
        "ceil": _Affine(a, b + d - 1, d, count),
    }[mode]
    return [(_clamped(rounding.expr(x), rounding.values(), size), None)]


def _linear(a: int, b: int, d: int, x: Expr, size: int, count: int, dtype: str) -> list[Tap]:
    numerators = [a * i + b for i in range(count)]
    top = (size - 1) * d
    numerator = _Affine(a, b, 1, count).expr(x)
    if min(numerators) < 0:
        numerator = maximum(numerator, 0)
    if max(numerators) > top:
        numerator = minimum(numerator, top)
    if d == 1:  # every coordinate is a whole index: one tap of weight 1
        return [(numerator, None)]
    low = numerator // d
    clipped = [min(max(n, 0), top) for n in numerators]
    high = low + 1
    if max(clipped) // d + 1 > size - 1:
        high = minimum(high, size - 1)
    fraction = cast(dtype, numerator % d) / typed(d, dtype)
    return [(low, typed(1, dtype) - fraction), (high, fraction)]


def _keys(distance: Expr, a: float, near: bool) -> Expr:
    """Keys' cubic kernel at |distance| <= 1 (near) or 1 < |distance| < 2 (far)."""
    dtype = distance.dtype
    if near:
        inner = typed(a + 2, dtype) * distance - typed(a + 3, dtype)
        return inner * distance * distance + typed(1, dtype)
    inner = (typed(a, dtype) * distance - typed(5 * a, dtype)) * distance + typed(8 * a, dtype)
    return inner * distance - typed(4 * a, dtype)


def _cubic(
    a: int, b: int, d: int, x: Expr, size: int, count: int, attrs: ResizeAttrs, dtype: str
) -> list[Tap]:
    base = _Affine(a, b, d, count)
    numerator = _Affine(a, b, 1, count).expr(x)
    fraction = cast(dtype, numerator % d) / typed(d, dtype)
    one, two = typed(1, dtype), typed(2, dtype)
    # Distances to the taps at floor - 1 .. floor + 2: fraction + 1, fraction,
    # 1 - fraction, 2 - fraction; the first and last are "far".
    distances = [(fraction + one, False), (fraction, True), (one - fraction, True)]
    distances.append((two - fraction, False))
    coeff = attrs.cubic_coeff_a
    weights = [_keys(distance, coeff, near) for distance, near in distances]
    indices = [base.expr(x) + shift if shift else base.expr(x) for shift in (-1, 0, 1, 2)]
    values = [[v + shift for v in base.values()] for shift in (-1, 0, 1, 2)]
    if attrs.exclude_outside:
        inside = [logical_and(i >= 0, i < size) for i in indices]
        weights = [select(ok, w, typed(0, dtype)) for ok, w in zip(inside, weights, strict=True)]
        total = weights[0] + weights[1] + weights[2] + weights[3]
        weights = [w / total for w in weights]
    return [
        (_clamped(index, vals, size), weight)
        for index, vals, weight in zip(indices, values, weights, strict=True)
    ]


def _axis_taps(attrs: ResizeAttrs, axis: int, size: int, x: Expr, dtype: str) -> list[Tap]:
    count = attrs.sizes[axis]
    coords = source_coordinates(attrs, axis, size)
    if coords is None or coords == list(range(size)):
        return [(x, None)]  # the axis is copied unchanged, as in the reference
    a, b, d = _coordinate(coords)
    if attrs.mode == "nearest":
        return _nearest(a, b, d, x, size, count, attrs.nearest_mode)
    if attrs.mode == "linear":
        return _linear(a, b, d, x, size, count, dtype)
    return _cubic(a, b, d, x, size, count, attrs, dtype)


def _resize(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    assert isinstance(attrs, ResizeAttrs)
    data = inputs[0]

    def element(*ax: Expr) -> Expr:
        per_axis = [
            _axis_taps(attrs, axis, size, ax[axis], data.dtype)
            for axis, size in enumerate(data.shape)
        ]
        total: Expr | None = None
        for combination in itertools.product(*per_axis):
            term: Expr = data[tuple(index for index, _ in combination)]
            for _, weight in combination:
                if weight is not None:
                    term = term * weight
            total = term if total is None else total + term
        assert total is not None
        return total

    shape = outputs[0].shape
    return [compute(shape, element, "T_resize", INJECTIVE, axis_names(len(shape)))]


DECLARATIONS: dict[str, Declaration] = {"resize": _resize}
