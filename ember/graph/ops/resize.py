"""`resize`: nearest, linear and cubic interpolation to a static output shape.

Interpolation is separable: each resized axis maps every output index to a few input
indices and weights (1 tap for nearest, 2 for linear, 4 for cubic), and the axes are
resized one after another, so bilinear and trilinear are linear applied per axis.

Source coordinates are evaluated exactly, in rational arithmetic. ONNX's formulas
(e.g. `(x + 0.5) / scale - 0.5`) often land exactly on a rounding boundary of
`nearest` (a coordinate of 3.5, or exactly 2); evaluated in floating point they fall
on either side depending on the order of operations, so every implementation differs
there. The exact value is the one the formula means, and the one generated code can
reproduce with integer arithmetic. An axis whose length and scale are unchanged is
left as it is (as ONNX Runtime does), even for transforms such as
`tf_half_pixel_for_nn` that would otherwise shift it by half a pixel.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from fractions import Fraction

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, TensorType
from ember.graph.ops.attrs import ResizeAttrs
from ember.graph.ops.registry import OpDef, OpPattern, register_op

HALF = Fraction(1, 2)
# The longest output axis a resize may have: its coordinates are computed one by one
# with fractions (~10 us each), at import and at build.
MAX_LENGTH = 1 << 20

# Source coordinate of output index x: (x, scale, input length, output length).
CoordinateTransform = Callable[[int, Fraction, int, int], Fraction]


def _half_pixel(x: int, scale: Fraction, size: int, out: int) -> Fraction:
    return (x + HALF) / scale - HALF


def _half_pixel_symmetric(x: int, scale: Fraction, size: int, out: int) -> Fraction:
    # Keeps the image centred when out / in differs from the scale (e.g. after
    # keep_aspect_ratio_policy); with scale == out / in this is half_pixel.
    adjustment = out / (scale * size)
    offset = Fraction(size, 2) * (1 - adjustment)
    return offset + _half_pixel(x, scale, size, out)


def _pytorch_half_pixel(x: int, scale: Fraction, size: int, out: int) -> Fraction:
    return _half_pixel(x, scale, size, out) if out > 1 else Fraction(0)


def _align_corners(x: int, scale: Fraction, size: int, out: int) -> Fraction:
    return Fraction(x * (size - 1), out - 1) if out > 1 else Fraction(0)


COORDINATE_TRANSFORMS: dict[str, CoordinateTransform] = {
    "half_pixel": _half_pixel,
    "half_pixel_symmetric": _half_pixel_symmetric,
    "pytorch_half_pixel": _pytorch_half_pixel,
    "align_corners": _align_corners,
    "asymmetric": lambda x, scale, size, out: x / scale,
    "tf_half_pixel_for_nn": lambda x, scale, size, out: (x + HALF) / scale,
}

# Nearest-neighbour rounding of an exact source coordinate.
NEAREST_MODES: dict[str, Callable[[Fraction], int]] = {
    "round_prefer_floor": lambda c: math.ceil(c - HALF),  # halves go down
    "round_prefer_ceil": lambda c: math.floor(c + HALF),  # halves go up
    "floor": math.floor,
    "ceil": math.ceil,
}

MODES = ("nearest", "linear", "cubic")


def exact_scale(scale: float, size: int, out: int) -> Fraction:
    """The scale as an exact rational. ONNX stores scales as float32, so a scale that
    is out / in rounded to float32 (always the case when the model gave sizes) means
    out / in exactly; any other scale is taken at its exact binary value."""
    ratio = Fraction(out, size)
    return ratio if np.float32(scale) == np.float32(out / size) else Fraction(scale)


def _keys_cubic(distance: np.ndarray, a: float) -> np.ndarray:
    """Keys' cubic convolution kernel with parameter `a` at |distance| < 2."""
    d = np.abs(distance)
    near = ((a + 2) * d - (a + 3)) * d * d + 1
    far = ((a * d - 5 * a) * d + 8 * a) * d - 4 * a
    return np.where(d <= 1, near, np.where(d < 2, far, 0.0))


# Taps of one axis: (input indices, weights), both of shape (output length, taps).
Taps = tuple[np.ndarray, np.ndarray]


def _nearest_taps(coords: list[Fraction], size: int, attrs: ResizeAttrs) -> Taps:
    rounding = NEAREST_MODES[attrs.nearest_mode]
    index = np.array([rounding(c) for c in coords], np.int64)
    return np.clip(index, 0, size - 1)[:, None], np.ones((len(coords), 1))


def _linear_taps(coords: list[Fraction], size: int, attrs: ResizeAttrs) -> Taps:
    # Coordinates outside the input clamp to its edge.
    clamped = [min(max(c, Fraction(0)), Fraction(size - 1)) for c in coords]
    low = np.array([math.floor(c) for c in clamped], np.int64)
    fraction = np.array([float(c - math.floor(c)) for c in clamped])
    high = np.minimum(low + 1, size - 1)
    return np.stack([low, high], axis=1), np.stack([1 - fraction, fraction], axis=1)


def _cubic_taps(coords: list[Fraction], size: int, attrs: ResizeAttrs) -> Taps:
    base = np.array([math.floor(c) for c in coords], np.int64)
    fraction = np.array([float(c - math.floor(c)) for c in coords])
    offsets = np.arange(-1, 3)  # the four taps around the coordinate
    indices = base[:, None] + offsets[None, :]
    weights = _keys_cubic(fraction[:, None] - offsets[None, :], attrs.cubic_coeff_a)
    if attrs.exclude_outside:
        # Taps outside the input get no weight; the others are renormalised to sum 1.
        weights = np.where((indices >= 0) & (indices < size), weights, 0.0)
        weights = weights / weights.sum(axis=1, keepdims=True)
    # Taps past an edge read the edge value.
    return np.clip(indices, 0, size - 1), weights


TAPS = {"nearest": _nearest_taps, "linear": _linear_taps, "cubic": _cubic_taps}


def _resize_infer(inputs: Sequence[TensorType], attrs: ResizeAttrs) -> tuple[TensorType, ...]:
    (data,) = inputs
    checks = [
        (len(attrs.sizes) == data.ndim, f"sizes {attrs.sizes} need one entry per axis"),
        (len(attrs.scales) == data.ndim, f"scales {attrs.scales} need one entry per axis"),
        (all(0 < s < math.inf for s in attrs.scales), f"scales {attrs.scales} must be positive"),
        (all(s >= 1 for s in attrs.sizes), f"sizes {attrs.sizes} must be >= 1"),
        (
            all(s <= MAX_LENGTH for s in attrs.sizes),
            f"sizes {attrs.sizes} exceed {MAX_LENGTH} on some axis (Ember computes each "
            "axis's source coordinates exactly, ahead of time)",
        ),
        (attrs.mode in MODES, f"mode {attrs.mode!r} is not one of {', '.join(MODES)}"),
        (
            attrs.coordinate_transformation_mode in COORDINATE_TRANSFORMS,
            f"coordinate_transformation_mode {attrs.coordinate_transformation_mode!r} is "
            f"not one of {', '.join(COORDINATE_TRANSFORMS)}",
        ),
        (
            attrs.nearest_mode in NEAREST_MODES,
            f"nearest_mode {attrs.nearest_mode!r} is not one of {', '.join(NEAREST_MODES)}",
        ),
        (
            attrs.mode == "nearest" or data.dtype in FLOAT_DTYPES,
            f"{attrs.mode} interpolation needs floating-point data, got {data.dtype}",
        ),
        (data.size > 0, f"cannot resize the empty tensor {data}"),
    ]
    for ok, message in checks:
        if not ok:
            raise ShapeError(f"resize of {data}: {message}")
    return (TensorType(tuple(attrs.sizes), data.dtype),)


def source_coordinates(attrs: ResizeAttrs, axis: int, size: int) -> list[Fraction] | None:
    """The exact input coordinate of every output index along `axis`; None when the
    axis keeps its length and a scale of 1 (it is copied unchanged)."""
    out = attrs.sizes[axis]
    if out == size and np.float32(attrs.scales[axis]) == 1:
        return None
    scale = exact_scale(attrs.scales[axis], size, out)
    transform = COORDINATE_TRANSFORMS[attrs.coordinate_transformation_mode]
    return [transform(x, scale, size, out) for x in range(out)]


def _resize_axis(data: np.ndarray, axis: int, attrs: ResizeAttrs) -> np.ndarray:
    size = data.shape[axis]
    coords = source_coordinates(attrs, axis, size)
    if coords is None or coords == list(range(size)):
        return data  # every output index reads its own input index with weight 1
    indices, weights = TAPS[attrs.mode](coords, size, attrs)
    if attrs.mode == "nearest":
        return np.take(data, indices[:, 0], axis=axis)
    # Weights broadcast along `axis`: shape (1, ..., out, ..., 1).
    weight_shape = [1] * data.ndim
    weight_shape[axis] = len(coords)
    return sum(
        np.take(data, indices[:, tap], axis=axis) * weights[:, tap].reshape(weight_shape)
        for tap in range(indices.shape[1])
    )


def _resize_reference(inputs: Sequence[np.ndarray], attrs: ResizeAttrs) -> tuple[np.ndarray, ...]:
    (data,) = inputs
    result = data if attrs.mode == "nearest" else data.astype(np.float64)
    # Axes that shrink first, those that grow last: the intermediate results stay as
    # small as they can (growing the batch 2**20 times first made 4 GiB of them).
    for axis in sorted(range(data.ndim), key=lambda axis: attrs.sizes[axis] / data.shape[axis]):
        result = _resize_axis(result, axis, attrs)
    return (result.astype(data.dtype),)


register_op(
    OpDef(
        "resize",
        OpPattern.INJECTIVE,
        _resize_infer,
        _resize_reference,
        attrs_type=ResizeAttrs,
        doc="Nearest / linear / cubic resize to a static shape, ONNX coordinate modes.",
    )
)
