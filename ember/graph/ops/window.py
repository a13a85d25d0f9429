"""Sliding-window arithmetic shared by convolution and pooling.

Output sizes, attribute checks and the strided window view that the references of
conv, conv_transpose and the pools are written with. Padding follows attrs.py:
`(begin_0, ..., begin_k, end_0, ..., end_k)` over the spatial axes.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np
from numpy.lib.stride_tricks import sliding_window_view

from ember.errors import ShapeError


def check_window_attrs(
    op: str,
    spatial_rank: int,
    strides: Sequence[int],
    padding: Sequence[int],
    dilations: Sequence[int],
) -> None:
    """Lengths match the spatial rank, strides and dilations are positive, pads >= 0."""
    lengths = {"strides": len(strides), "dilations": len(dilations)}
    for name, length in lengths.items():
        if length != spatial_rank:
            raise ShapeError(
                f"{op}: {name} has {length} entries but the data has {spatial_rank} "
                "spatial axes; give one per spatial axis"
            )
    if len(padding) != 2 * spatial_rank:
        raise ShapeError(
            f"{op}: padding has {len(padding)} entries; it needs {2 * spatial_rank} "
            "(all begins, then all ends)"
        )
    if any(s < 1 for s in strides) or any(d < 1 for d in dilations):
        raise ShapeError(
            f"{op}: strides {tuple(strides)} and dilations {tuple(dilations)} must be >= 1"
        )
    if any(p < 0 for p in padding):
        raise ShapeError(f"{op}: padding {tuple(padding)} must be non-negative")


def dilated_extent(kernel: int, dilation: int) -> int:
    """How many input positions a dilated kernel spans."""
    return dilation * (kernel - 1) + 1


def window_output_size(
    op: str,
    size: int,
    kernel: int,
    stride: int,
    pad_begin: int,
    pad_end: int,
    dilation: int,
    ceil_mode: bool = False,
) -> int:
    """Number of window positions along one axis.

    With `ceil_mode` a final partial window is kept, except one that would start in the
    end padding (ONNX's and PyTorch's rule: such a window sees no input at all).
    """
    span = size + pad_begin + pad_end - dilated_extent(kernel, dilation)
    if span < 0:
        raise ShapeError(
            f"{op}: a kernel of {kernel} with dilation {dilation} does not fit in a "
            f"spatial axis of {size} padded by ({pad_begin}, {pad_end}); "
            "use a smaller kernel or more padding"
        )
    if not ceil_mode:
        return span // stride + 1
    count = math.ceil(span / stride) + 1
    if (count - 1) * stride >= size + pad_begin:
        count -= 1
    return count


def windows(
    data: np.ndarray,
    kernel: Sequence[int],
    strides: Sequence[int],
    dilations: Sequence[int],
    output_sizes: Sequence[int],
) -> np.ndarray:
    """A strided view of the windows of already padded N, C, spatial... data:
    shape (N, C, *output_sizes, *kernel), window taps at the dilated positions."""
    spatial_rank = len(kernel)
    axes = tuple(range(2, 2 + spatial_rank))
    extents = tuple(dilated_extent(k, d) for k, d in zip(kernel, dilations, strict=True))
    view = sliding_window_view(data, extents, axis=axes)
    positions = tuple(
        slice(0, (count - 1) * stride + 1, stride)
        for count, stride in zip(output_sizes, strides, strict=True)
    )
    taps = tuple(slice(None, None, d) for d in dilations)
    return view[(slice(None), slice(None), *positions, *taps)]


def pad_spatial(data: np.ndarray, padding: Sequence[int], value: float = 0) -> np.ndarray:
    """Pad the spatial axes (2...) of N, C, spatial... data by (begins..., ends...)."""
    spatial_rank = data.ndim - 2
    widths = [(0, 0), (0, 0)] + [
        (padding[axis], padding[axis + spatial_rank]) for axis in range(spatial_rank)
    ]
    return np.pad(data, widths, mode="constant", constant_values=value)
