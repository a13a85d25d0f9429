"""Layout strings of the spatial ops (conv, pooling, instance norm, resize helpers).

A data layout names each axis of a tensor with one letter: `N` (batch), `C` (channels)
and the spatial letters `W`, `HW` or `DHW` for 1-, 2- and 3-d data, so "NCHW" is
channels-first 2-d and "NHWC" channels-last 2-d. A kernel layout names the axes of a
conv weight: `O` (output channels), `I` (input channels per group) and the spatial
letters, e.g. "OIHW" or "HWIO". References compute in the channels-first form and
transpose back, so every layout shares one implementation.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ember.errors import ShapeError

# Spatial axis letters by spatial rank, outermost first.
SPATIAL_LETTERS = {1: "W", 2: "HW", 3: "DHW"}


@dataclass(frozen=True, slots=True)
class DataLayout:
    """Where the batch, channel and spatial axes of a data layout string sit."""

    name: str
    batch_axis: int
    channel_axis: int
    spatial_axes: tuple[int, ...]

    @property
    def spatial_rank(self) -> int:
        return len(self.spatial_axes)

    @property
    def channels_last(self) -> bool:
        return self.channel_axis == len(self.name) - 1

    @property
    def to_channels_first(self) -> tuple[int, ...]:
        """The transpose permutation from this layout to N, C, spatial..."""
        return (self.batch_axis, self.channel_axis, *self.spatial_axes)


@dataclass(frozen=True, slots=True)
class KernelLayout:
    """Where the output-channel, input-channel and spatial axes of a weight sit."""

    name: str
    out_axis: int
    in_axis: int
    spatial_axes: tuple[int, ...]

    @property
    def to_out_in_first(self) -> tuple[int, ...]:
        """The transpose permutation from this layout to O, I, spatial..."""
        return (self.out_axis, self.in_axis, *self.spatial_axes)


def channels_first(spatial_rank: int) -> str:
    """ "NCW", "NCHW" or "NCDHW"."""
    return "NC" + _letters(spatial_rank, "channels-first layout")


def channels_last(spatial_rank: int) -> str:
    """ "NWC", "NHWC" or "NDHWC"."""
    return "N" + _letters(spatial_rank, "channels-last layout") + "C"


def kernel_out_in_first(spatial_rank: int) -> str:
    """ "OIW", "OIHW" or "OIDHW"."""
    return "OI" + _letters(spatial_rank, "kernel layout")


def _letters(spatial_rank: int, what: str) -> str:
    if spatial_rank not in SPATIAL_LETTERS:
        raise ShapeError(
            f"a {what} needs 1, 2 or 3 spatial axes, got {spatial_rank}; "
            "Ember's spatial ops support 1-d, 2-d and 3-d data"
        )
    return SPATIAL_LETTERS[spatial_rank]


def parse_data_layout(layout: str, op: str, rank: int | None = None) -> DataLayout:
    """Decode a data layout, checking it is channels-first or channels-last and (if
    `rank` is given) that it names every axis of a rank-`rank` tensor."""
    spatial = layout.replace("N", "", 1).replace("C", "", 1)
    valid = (
        len(spatial) in SPATIAL_LETTERS
        and spatial == SPATIAL_LETTERS[len(spatial)]
        and layout in ("NC" + spatial, "N" + spatial + "C")
    )
    if not valid:
        raise ShapeError(
            f"{op}: unsupported data layout {layout!r}; use a channels-first layout "
            "(NCW, NCHW, NCDHW) or a channels-last one (NWC, NHWC, NDHWC)"
        )
    if rank is not None and rank != len(layout):
        raise ShapeError(
            f"{op}: data of rank {rank} does not match layout {layout!r} ({len(layout)} axes)"
        )
    return DataLayout(
        name=layout,
        batch_axis=layout.index("N"),
        channel_axis=layout.index("C"),
        spatial_axes=tuple(layout.index(letter) for letter in spatial),
    )


def parse_kernel_layout(layout: str, op: str, spatial_rank: int) -> KernelLayout:
    """Decode a kernel layout with `spatial_rank` spatial axes (OI... or ...IO)."""
    spatial = SPATIAL_LETTERS.get(spatial_rank, "")
    if not spatial or layout not in ("OI" + spatial, spatial + "IO"):
        expected = f"'OI{spatial}' or '{spatial}IO'" if spatial else "a valid kernel layout"
        raise ShapeError(
            f"{op}: unsupported kernel layout {layout!r} for {spatial_rank}-d data; use {expected}"
        )
    return KernelLayout(
        name=layout,
        out_axis=layout.index("O"),
        in_axis=layout.index("I"),
        spatial_axes=tuple(layout.index(letter) for letter in spatial),
    )


def to_channels_first(array: np.ndarray, layout: DataLayout) -> np.ndarray:
    """View `array` (in `layout`) as N, C, spatial..."""
    return np.transpose(array, layout.to_channels_first)


def from_channels_first(array: np.ndarray, layout: DataLayout) -> np.ndarray:
    """View an N, C, spatial... array in `layout`."""
    return np.transpose(array, np.argsort(layout.to_channels_first))


def permute_shape(shape: tuple[int, ...], permutation: tuple[int, ...]) -> tuple[int, ...]:
    return tuple(shape[axis] for axis in permutation)


def unpermute_shape(shape: tuple[int, ...], permutation: tuple[int, ...]) -> tuple[int, ...]:
    """The inverse of `permute_shape`: put a channels-first shape back into a layout."""
    result = [0] * len(shape)
    for position, axis in enumerate(permutation):
        result[axis] = shape[position]
    return tuple(result)
