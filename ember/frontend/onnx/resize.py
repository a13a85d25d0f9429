"""ONNX Resize (opsets 10, 11, 13, 18, 19) and Upsample (opsets 7, 9) converters.

Both become the graph op `resize` with a static output shape. Scales and sizes must be
constants. Output lengths and scales are computed in float32, as ONNX states them and
ONNX Runtime evaluates them, so borderline products round the same way.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from ember.errors import ModelLoadError, UnsupportedOperatorError
from ember.frontend.onnx.registry import ConversionContext, OnnxNode, converter, int_list
from ember.frontend.onnx.tensor import normalize_axes
from ember.graph.ir import Value
from ember.graph.ops.attrs import ResizeAttrs
from ember.graph.ops.resize import COORDINATE_TRANSFORMS, MAX_LENGTH, NEAREST_MODES

_F32 = np.float32

# ONNX mode names -> graph resize modes (Upsample-7 also spelt "bilinear").
_MODES = {"nearest": "nearest", "linear": "linear", "bilinear": "linear", "cubic": "cubic"}


def _mode(node: OnnxNode) -> str:
    mode = str(node.attr("mode", "nearest"))
    if mode not in _MODES:
        raise UnsupportedOperatorError(
            f"{node.where}: mode {mode!r} is not supported (use nearest, linear or cubic)"
        )
    return _MODES[mode]


def _sizes_from_scales(
    node: OnnxNode, shape: Sequence[int], scales: Sequence[float]
) -> tuple[int, ...]:
    if len(scales) != len(shape) or not all(0 < _F32(s) < np.inf for s in scales):
        raise ModelLoadError(
            f"{node.where}: scales {list(scales)} need one positive, finite float32 entry "
            f"per axis of the rank-{len(shape)} input"
        )
    with np.errstate(over="ignore"):
        lengths = [np.floor(_F32(d) * _F32(s)) for d, s in zip(shape, scales, strict=True)]
    if not all(np.isfinite(lengths)):
        raise ModelLoadError(
            f"{node.where}: scales {list(scales)} make an axis longer than float32 counts "
            f"(Ember resizes axes up to {MAX_LENGTH} elements)"
        )
    return tuple(int(length) for length in lengths)


def _legacy_nearest_mode(node: OnnxNode, scales: Sequence[float]) -> str:
    """Before opset 11 nearest rounding was not specified; ONNX Runtime truncates when
    upsampling and rounds up when downsampling, which Ember supports when all axes
    agree."""
    if all(s >= 1 for s in scales):
        return "floor"
    if all(s <= 1 for s in scales):
        return "ceil"
    raise UnsupportedOperatorError(
        f"{node.where}: nearest resize that upsamples some axes and downsamples others "
        f"(scales {list(scales)}) is not supported before opset 11"
    )


def _legacy_resize(node: OnnxNode, data: Value, scales: Sequence[float]) -> ResizeAttrs:
    """Upsample-7/9 and Resize-10: asymmetric coordinates, output floor(in * scale)."""
    mode = _mode(node)
    sizes = _sizes_from_scales(node, data.shape, scales)
    return ResizeAttrs(
        sizes=sizes,
        scales=tuple(float(_F32(s)) for s in scales),
        mode=mode,
        coordinate_transformation_mode="asymmetric",
        nearest_mode=_legacy_nearest_mode(node, scales) if mode == "nearest" else "floor",
    )


@converter("Upsample")
def convert_upsample(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    if ctx.opset < 9:
        scales = [float(s) for s in np.asarray(node.attr("scales")).reshape(-1)]
    else:
        scales = [float(s) for s in ctx.require_constant(node, 1, "scales").reshape(-1)]
    attrs = _legacy_resize(node, data, scales)
    return [ctx.builder.add("resize", [data], attrs, node.name)]


def _axes(node: OnnxNode, rank: int) -> tuple[int, ...]:
    """Resize-18's `axes`: which axes scales/sizes describe (all by default)."""
    if "axes" not in node.attrs:
        return tuple(range(rank))
    return normalize_axes(node, int_list(node.attr("axes")), rank)


def _optional_constant(ctx: ConversionContext, node: OnnxNode, index: int, what: str) -> list:
    """A constant optional input as a flat list; empty when absent or an empty tensor."""
    if node.optional_input(index) is None:
        return []
    return list(ctx.require_constant(node, index, what).reshape(-1))


def _scales_and_sizes(
    ctx: ConversionContext, node: OnnxNode, shape: Sequence[int]
) -> tuple[tuple[float, ...], tuple[int, ...]]:
    """Per-axis scales and output lengths of a Resize-11+ node."""
    rank = len(shape)
    axes = _axes(node, rank)
    given_scales = [float(s) for s in _optional_constant(ctx, node, 2, "scales")]
    given_sizes = int_list(_optional_constant(ctx, node, 3, "sizes"))
    if bool(given_scales) == bool(given_sizes):
        raise ModelLoadError(
            f"{node.where}: exactly one of the scales and sizes inputs must be given"
        )
    if len(given_scales or given_sizes) != len(axes):
        raise ModelLoadError(
            f"{node.where}: {'scales' if given_scales else 'sizes'} need one entry per "
            f"resized axis ({len(axes)})"
        )
    scales = [1.0] * rank
    if given_scales:
        for axis, scale in zip(axes, given_scales, strict=True):
            scales[axis] = scale
        return tuple(float(_F32(s)) for s in scales), _sizes_from_scales(node, shape, scales)
    sizes = list(shape)
    policy = str(node.attr("keep_aspect_ratio_policy", "stretch"))
    if policy == "stretch":
        for axis, size in zip(axes, given_sizes, strict=True):
            sizes[axis] = size
            scales[axis] = float(_F32(size) / _F32(shape[axis]))
        return tuple(scales), tuple(sizes)
    ratios = [
        float(_F32(size) / _F32(shape[axis])) for axis, size in zip(axes, given_sizes, strict=True)
    ]
    pick = {"not_larger": min, "not_smaller": max}.get(policy)
    if pick is None:
        raise ModelLoadError(
            f"{node.where}: keep_aspect_ratio_policy {policy!r} is not one of stretch, "
            "not_larger, not_smaller"
        )
    # One scale for all resized axes keeps the aspect ratio; lengths round half up.
    scale = pick(ratios)
    for axis in axes:
        sizes[axis] = int(np.floor(_F32(scale) * _F32(shape[axis]) + _F32(0.5)))
        scales[axis] = float(scale)
    return tuple(scales), tuple(sizes)


def _checked_choice(node: OnnxNode, name: str, default: str, allowed: Sequence[str]) -> str:
    value = str(node.attr(name, default))
    if value not in allowed:
        raise UnsupportedOperatorError(
            f"{node.where}: {name} {value!r} is not supported (use one of {', '.join(allowed)})"
        )
    return value


@converter("Resize")
def convert_resize(ctx: ConversionContext, node: OnnxNode) -> list[Value | None]:
    data = node.input(0)
    if ctx.opset < 11:
        legacy_scales = [float(s) for s in ctx.require_constant(node, 1, "scales").reshape(-1)]
        legacy = _legacy_resize(node, data, legacy_scales)
        return [ctx.builder.add("resize", [data], legacy, node.name)]
    if node.flag_attr("antialias", False):
        raise UnsupportedOperatorError(f"{node.where}: antialias=1 is not supported")
    transform = _checked_choice(
        node, "coordinate_transformation_mode", "half_pixel", tuple(COORDINATE_TRANSFORMS)
    )
    scales, sizes = _scales_and_sizes(ctx, node, data.shape)
    attrs = ResizeAttrs(
        sizes=sizes,
        scales=scales,
        mode=_mode(node),
        coordinate_transformation_mode=transform,
        nearest_mode=_checked_choice(
            node, "nearest_mode", "round_prefer_floor", tuple(NEAREST_MODES)
        ),
        cubic_coeff_a=node.float_attr("cubic_coeff_a", -0.75),
        exclude_outside=node.flag_attr("exclude_outside", False),
    )
    return [ctx.builder.add("resize", [data], attrs, node.name)]
