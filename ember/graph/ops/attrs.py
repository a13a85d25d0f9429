"""Attribute records of the graph ops, shared by the registry, frontends and passes.

Conventions: spatial padding is `(begin_0, ..., begin_k, end_0, ..., end_k)` over the
spatial axes in order (ONNX's `pads` order); layouts are strings naming each axis
(`"NCHW"`, `"NHWC"`, `"NCDHW"`, ...); axes are non-negative after the frontend has
normalised them.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

from ember.graph.ir import Attrs


@dataclass(frozen=True, slots=True)
class AlphaAttrs(Attrs):
    """leaky_relu, elu."""

    alpha: float


@dataclass(frozen=True, slots=True)
class SeluAttrs(Attrs):
    alpha: float
    gamma: float


@dataclass(frozen=True, slots=True)
class HardSigmoidAttrs(Attrs):
    """max(0, min(1, alpha * x + beta))."""

    alpha: float
    beta: float


@dataclass(frozen=True, slots=True)
class GeluAttrs(Attrs):
    approximate: str = "none"  # "none" (erf) or "tanh"


@dataclass(frozen=True, slots=True)
class ClipAttrs(Attrs):
    """min(max(x, low), high); None means unbounded on that side."""

    low: float | None
    high: float | None


@dataclass(frozen=True, slots=True)
class CastAttrs(Attrs):
    dtype: str


@dataclass(frozen=True, slots=True)
class AxisAttrs(Attrs):
    """softmax, log_softmax, concat, gather."""

    axis: int


@dataclass(frozen=True, slots=True)
class ConvAttrs(Attrs):
    """N-d convolution; inputs (data, weight). Bias is a separate broadcast add.

    `layout` is the data layout ("NCW", "NCHW", "NCDHW" or "NWC", "NHWC", "NDHWC") and
    `kernel_layout` the weight's ("OIW", "OIHW", "OIDHW" or "WIO", "HWIO", "DHWIO"),
    where I is input channels per group and O is total output channels.
    """

    strides: tuple[int, ...]
    padding: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    layout: str = "NCHW"
    kernel_layout: str = "OIHW"


@dataclass(frozen=True, slots=True)
class ConvTransposeAttrs(Attrs):
    """N-d transposed convolution, channels-first data, weight (I, O/groups, *kernel)."""

    strides: tuple[int, ...]
    padding: tuple[int, ...]
    output_padding: tuple[int, ...]
    dilations: tuple[int, ...]
    groups: int
    layout: str = "NCHW"


@dataclass(frozen=True, slots=True)
class PoolAttrs(Attrs):
    """max_pool / avg_pool over the spatial axes of `layout`."""

    kernel: tuple[int, ...]
    strides: tuple[int, ...]
    padding: tuple[int, ...]
    dilations: tuple[int, ...]
    ceil_mode: bool = False
    count_include_pad: bool = False
    layout: str = "NCHW"


@dataclass(frozen=True, slots=True)
class LayoutAttrs(Attrs):
    """global_avg_pool, global_max_pool: reduce all spatial axes, keeping them as 1."""

    layout: str = "NCHW"


@dataclass(frozen=True, slots=True)
class BatchNormAttrs(Attrs):
    """Inference batch norm; inputs (x, scale, bias, mean, var), all vectors on `axis`."""

    epsilon: float
    axis: int = 1


@dataclass(frozen=True, slots=True)
class InstanceNormAttrs(Attrs):
    """Inputs (x, scale, bias); normalises over all spatial axes per (n, c)."""

    epsilon: float
    layout: str = "NCHW"


@dataclass(frozen=True, slots=True)
class LayerNormAttrs(Attrs):
    """Inputs (x, scale, bias); normalises over axes `axis..ndim-1`."""

    axis: int
    epsilon: float


@dataclass(frozen=True, slots=True)
class LrnAttrs(Attrs):
    """Local response normalisation across channels (axis 1), ONNX's LRN:
    x / (bias + alpha / size * sum of x^2 over `size` neighbouring channels) ** beta."""

    size: int
    alpha: float = 0.0001
    beta: float = 0.75
    bias: float = 1.0


@dataclass(frozen=True, slots=True)
class ResizeAttrs(Attrs):
    """Resize to the static output shape `sizes` (all axes).

    mode: "nearest", "linear" or "cubic"; coordinate_transformation_mode and
    nearest_mode follow ONNX's names ("half_pixel", "align_corners", "asymmetric",
    "pytorch_half_pixel", "tf_crop_and_resize" is not supported; "round_prefer_floor",
    "floor", ...). `scales` are the per-axis scale factors used for the coordinate
    transform (output / input unless the model gave explicit scales).
    """

    sizes: tuple[int, ...]
    scales: tuple[float, ...]
    mode: str = "nearest"
    coordinate_transformation_mode: str = "half_pixel"
    nearest_mode: str = "round_prefer_floor"
    cubic_coeff_a: float = -0.75
    exclude_outside: bool = False


@dataclass(frozen=True, slots=True)
class ReshapeAttrs(Attrs):
    """The complete output shape (no 0 or -1: the frontend resolves them)."""

    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TransposeAttrs(Attrs):
    perm: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SplitAttrs(Attrs):
    axis: int
    sizes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class SliceAttrs(Attrs):
    """One (begin, end, step) per axis, all axes, already clamped like Python slices.

    For a negative step an `end` of -1 means "through index 0" (no wrap-around)."""

    begins: tuple[int, ...]
    ends: tuple[int, ...]
    steps: tuple[int, ...]

    @classmethod
    def along(
        cls, shape: Sequence[int], axis: int, begin: int, end: int, step: int = 1
    ) -> SliceAttrs:
        """Every element of `shape` but along `axis`, where begin:end:step."""
        begins, ends, steps = [0] * len(shape), list(shape), [1] * len(shape)
        begins[axis], ends[axis], steps[axis] = begin, end, step
        return cls(tuple(begins), tuple(ends), tuple(steps))


@dataclass(frozen=True, slots=True)
class PadAttrs(Attrs):
    """pads: (begin_0, ..., begin_{n-1}, end_0, ..., end_{n-1}) over all axes, >= 0."""

    pads: tuple[int, ...]
    mode: str = "constant"  # "constant", "reflect", "edge"
    value: float = 0.0


@dataclass(frozen=True, slots=True)
class ShapeAttrs(Attrs):
    """broadcast_to: the output shape."""

    shape: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class TileAttrs(Attrs):
    reps: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class BlockAttrs(Attrs):
    """depth_to_space / space_to_depth. mode is "DCR" or "CRD" (ONNX's orders)."""

    block_size: int
    mode: str = "DCR"
    layout: str = "NCHW"


@dataclass(frozen=True, slots=True)
class ReduceAttrs(Attrs):
    """reduce_sum / _mean / _max / _min / _prod / _sum_square / _l1 / _l2 / _log_sum_exp.

    `axes` are distinct and non-negative; an empty tuple means "reduce all axes" (the
    frontend turns ONNX's noop_with_empty_axes=1 into an `identity` instead)."""

    axes: tuple[int, ...]
    keepdims: bool = True


@dataclass(frozen=True, slots=True)
class ArgReduceAttrs(Attrs):
    """argmax / argmin, int64 output."""

    axis: int
    keepdims: bool = True
    select_last_index: bool = False


@dataclass(frozen=True, slots=True)
class TopKAttrs(Attrs):
    """topk: outputs (values, int64 indices)."""

    k: int
    axis: int
    largest: bool = True
    sorted: bool = True


@dataclass(frozen=True, slots=True)
class QConvAttrs(ConvAttrs):
    """`qconv` / `qconv_pack`: a conv of integers (uint8 or int8 data, int8 weight)
    accumulated exactly in int32, of `data - data_zero_point` (the weight's zero point is
    0: symmetric, as ONNX Runtime's and TFLite's quantizers write weights)."""

    data_zero_point: int = 0
