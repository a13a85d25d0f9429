"""Ops of a 3x3 convolution computed by Winograd's minimal filtering F(m x m, 3 x 3),
which the `winograd` pass rewrites channels-last, stride-1 convs with constant weights
into (see `ember.graph.passes.winograd`).

A conv's output is cut into tiles of m x m pixels; each tile reads an (m+2) x (m+2)
patch of the padded input. With `a = m + 2`, Lavin and Gray's transforms give each
tile as

    Y = Aᵀ [ (G g Gᵀ) ⊙ (Bᵀ d B) ] A        (per input channel, summed over them)

so the conv becomes three steps, one op each:

- `winograd_input(x[N, H, W, C]) -> V[a*a, N*T, C]`: `V[e, tile, c] = (Bᵀ d B)[e]` of
  each tile's patch `d` (T tiles per image, padded as the conv was, and further at the
  bottom and right to whole tiles);
- `matmul(V, U[a*a, C, K]) -> M[a*a, N*T, K]`: a batch of a*a matrix products with the
  weight transformed at build time, `U[e] = (G g Gᵀ)[e]` (`transform_weight`);
- `winograd_output(M) -> Y[N, OH, OW, K]`: `Aᵀ M A` of each tile, cropped to the
  conv's output.

The product then does a*a / (m*m*9) of the conv's multiply-adds: 16/36 for F(2x2, 3x3),
36/144 for F(4x4, 3x3). Bᵀ and Aᵀ hold small integers, so the two transforms are
sums of a few terms; G has fractions, applied once to the constant weight in float64.
The rounding differs from the direct sum's: F(2x2) adds or subtracts up to 4 inputs
per transformed element and 9 products per output, F(4x4) up to 16 and 25 with
coefficients up to 8, a few ulps of the inputs' and outputs' magnitude either way.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, Attrs, TensorType
from ember.graph.ops.registry import OpDef, OpPattern, register_op

KERNEL = 3  # the filter size every transform below is for
TILE_SIZES = (2, 4)


@dataclass(frozen=True, slots=True)
class WinogradInputAttrs(Attrs):
    """winograd_input: output tiles of `tile` x `tile` pixels of a 3x3 conv padded by
    `padding` (top, left, bottom, right, as the conv's)."""

    tile: int
    padding: tuple[int, int, int, int]


@dataclass(frozen=True, slots=True)
class WinogradOutputAttrs(Attrs):
    """winograd_output: tiles of `tile` x `tile` pixels cropped to a conv output of
    `height` x `width`."""

    tile: int
    height: int
    width: int


@dataclass(frozen=True, slots=True)
class Transforms:
    """Bᵀ (a x a), G (a x 3) and Aᵀ (m x a) of F(m x m, 3 x 3) for one tile size m."""

    input: np.ndarray
    weight: np.ndarray
    output: np.ndarray

    @property
    def points(self) -> int:
        """a = m + 2: the side of a tile's input patch and of its transformed tile."""
        return int(self.input.shape[0])


@cache
def transforms(tile: int) -> Transforms:
    """The transform matrices of F(tile x tile, 3 x 3), interpolating at 0, ±1 (and ±2
    for tile 4) and infinity."""
    if tile == 2:
        input_t = [[1, 0, -1, 0], [0, 1, 1, 0], [0, -1, 1, 0], [0, 1, 0, -1]]
        weight = [[1, 0, 0], [0.5, 0.5, 0.5], [0.5, -0.5, 0.5], [0, 0, 1]]
        output_t = [[1, 1, 1, 0], [0, 1, -1, -1]]
    elif tile == 4:
        input_t = [
            [4, 0, -5, 0, 1, 0],
            [0, -4, -4, 1, 1, 0],
            [0, 4, -4, -1, 1, 0],
            [0, -2, -1, 2, 1, 0],
            [0, 2, -1, -2, 1, 0],
            [0, 4, 0, -5, 0, 1],
        ]
        weight = [
            [1 / 4, 0, 0],
            [-1 / 6, -1 / 6, -1 / 6],
            [-1 / 6, 1 / 6, -1 / 6],
            [1 / 24, 1 / 12, 1 / 6],
            [1 / 24, -1 / 12, 1 / 6],
            [0, 0, 1],
        ]
        output_t = [
            [1, 1, 1, 1, 1, 0],
            [0, 1, -1, 2, -2, 0],
            [0, 1, 1, 4, 4, 0],
            [0, 1, -1, 8, -8, 1],
        ]
    else:
        raise ShapeError(
            f"winograd: tiles of {tile} pixels are not supported; use one of {TILE_SIZES}"
        )
    return Transforms(
        np.array(input_t, np.float64), np.array(weight, np.float64), np.array(output_t, np.float64)
    )


def tile_counts(height: int, width: int, tile: int) -> tuple[int, int]:
    """Tiles down and across a conv output of `height` x `width`."""
    return math.ceil(height / tile), math.ceil(width / tile)


def transform_weight(weight: np.ndarray, tile: int) -> np.ndarray:
    """A conv's `HWIO` weight `[3, 3, C, K]` as `U[a*a, C, K]`, `U[e] = (G g Gᵀ)[e]`,
    computed in float64 and rounded once to the weight's dtype."""
    if weight.ndim != 4 or weight.shape[:2] != (KERNEL, KERNEL):
        raise ShapeError(
            f"winograd: the weight must be HWIO [3, 3, C, K], got {list(weight.shape)}"
        )
    g = transforms(tile).weight
    points = g.shape[0]
    transformed = np.einsum("ea,fb,abck->efck", g, g, weight.astype(np.float64))
    return transformed.reshape(points * points, *weight.shape[2:]).astype(weight.dtype)


def nonzero_terms(matrix: np.ndarray) -> tuple[list[list[int]], list[list[float]]]:
    """Per row of a transform, the columns of its nonzero entries and their values,
    each row padded to the widest with (column 0, value 0): what the kernels sum."""
    columns = [[int(j) for j in np.flatnonzero(row)] for row in matrix]
    width = max(len(row) for row in columns)
    values = [[float(matrix[i, j]) for j in row] for i, row in enumerate(columns)]
    return (
        [row + [0] * (width - len(row)) for row in columns],
        [row + [0.0] * (width - len(row)) for row in values],
    )


# -- winograd_input ----------------------------------------------------------------


def input_geometry(shape: Sequence[int], attrs: WinogradInputAttrs) -> tuple[int, int, int, int]:
    """(conv output height, width, tiles down, tiles across) of an NHWC input `shape`."""
    _, height, width, _ = shape
    top, left, bottom, right = attrs.padding
    out_height = height + top + bottom - (KERNEL - 1)
    out_width = width + left + right - (KERNEL - 1)
    return (out_height, out_width, *tile_counts(out_height, out_width, attrs.tile))


def _input_infer(inputs: Sequence[TensorType], attrs: WinogradInputAttrs) -> tuple[TensorType, ...]:
    (x,) = inputs
    points = transforms(attrs.tile).points
    if x.ndim != 4 or x.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"winograd_input: takes floating-point NHWC data, got {x}")
    if len(attrs.padding) != 4 or min(attrs.padding) < 0:
        raise ShapeError(f"winograd_input: padding must be 4 sizes >= 0, got {attrs.padding}")
    out_height, out_width, down, across = input_geometry(x.shape, attrs)
    if out_height < 1 or out_width < 1:
        raise ShapeError(f"winograd_input: {x} padded by {attrs.padding} is smaller than 3x3")
    return (TensorType((points * points, x.shape[0] * down * across, x.shape[3]), x.dtype),)


def tiled_padding(shape: Sequence[int], attrs: WinogradInputAttrs) -> tuple[int, int, int, int]:
    """(top, left, bottom, right) padding of an NHWC input `shape` that covers its
    whole tiles: the conv's, and more at the bottom and right where the output is not
    whole tiles."""
    _, _, down, across = input_geometry(shape, attrs)
    top, left, _, _ = attrs.padding
    bottom = down * attrs.tile + KERNEL - 1 - top - shape[1]
    right = across * attrs.tile + KERNEL - 1 - left - shape[2]
    return top, left, bottom, right


def input_patches(x: np.ndarray, attrs: WinogradInputAttrs) -> np.ndarray:
    """Each tile's (m+2) x (m+2) input patch: `[N, tiles down, tiles across, a, a, C]`."""
    tile, points = attrs.tile, transforms(attrs.tile).points
    _, _, down, across = input_geometry(x.shape, attrs)
    top, left, bottom, right = tiled_padding(x.shape, attrs)
    padded = np.pad(x, ((0, 0), (top, bottom), (left, right), (0, 0)))
    windows = np.lib.stride_tricks.sliding_window_view(padded, (points, points), axis=(1, 2))
    return windows[:, : down * tile : tile, : across * tile : tile].transpose(0, 1, 2, 4, 5, 3)


def _input_reference(inputs: Sequence[np.ndarray], attrs: WinogradInputAttrs) -> tuple[np.ndarray]:
    (x,) = inputs
    input_t = transforms(attrs.tile).input
    patches = input_patches(x.astype(np.float64), attrs)
    transformed = np.einsum("ea,fb,ntuabc->efntuc", input_t, input_t, patches)
    points, batch, down, across, channels = input_t.shape[0], *patches.shape[:3], x.shape[3]
    shaped = transformed.reshape(points * points, batch * down * across, channels)
    return (shaped.astype(x.dtype),)


def _transform_ops(matrix: np.ndarray, outputs: Sequence[TensorType]) -> int:
    """Operations of a transform by `matrix` on each side: every output element adds
    up its row's and column's nonzero terms."""
    columns, _ = nonzero_terms(matrix)
    return outputs[0].size * len(columns[0]) ** 2


def _input_ops(inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: Attrs) -> int:
    assert isinstance(attrs, WinogradInputAttrs)
    return _transform_ops(transforms(attrs.tile).input, outputs)


register_op(
    OpDef(
        "winograd_input",
        OpPattern.INJECTIVE,
        _input_infer,
        _input_reference,
        attrs_type=WinogradInputAttrs,
        macs=_input_ops,
        doc="Winograd input transform of a 3x3 conv's tiles (the winograd pass makes it).",
    )
)

# -- winograd_output ---------------------------------------------------------------


def _output_infer(
    inputs: Sequence[TensorType], attrs: WinogradOutputAttrs
) -> tuple[TensorType, ...]:
    (m,) = inputs
    points = transforms(attrs.tile).points
    down, across = tile_counts(attrs.height, attrs.width, attrs.tile)
    if (
        m.ndim != 3
        or m.dtype not in FLOAT_DTYPES
        or m.shape[0] != points * points
        or m.shape[1] % (down * across)
        or min(attrs.height, attrs.width) < 1
    ):
        raise ShapeError(
            f"winograd_output: {m} is not [{points * points}, N * {down * across} tiles, K] "
            f"for a {attrs.height}x{attrs.width} output in tiles of {attrs.tile}"
        )
    batch = m.shape[1] // (down * across)
    return (TensorType((batch, attrs.height, attrs.width, m.shape[2]), m.dtype),)


def _output_reference(
    inputs: Sequence[np.ndarray], attrs: WinogradOutputAttrs
) -> tuple[np.ndarray]:
    (m,) = inputs
    output_t = transforms(attrs.tile).output
    points, tile = output_t.shape[1], attrs.tile
    down, across = tile_counts(attrs.height, attrs.width, tile)
    tiles = m.astype(np.float64).reshape(points, points, -1, down, across, m.shape[2])
    pixels = np.einsum("ia,jb,abntuk->ntiujk", output_t, output_t, tiles)
    image = pixels.reshape(-1, down * tile, across * tile, m.shape[2])
    return (np.ascontiguousarray(image[:, : attrs.height, : attrs.width]).astype(m.dtype),)


def _output_ops(inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: Attrs) -> int:
    assert isinstance(attrs, WinogradOutputAttrs)
    return _transform_ops(transforms(attrs.tile).output, outputs)


register_op(
    OpDef(
        "winograd_output",
        OpPattern.INJECTIVE,
        _output_infer,
        _output_reference,
        attrs_type=WinogradOutputAttrs,
        macs=_output_ops,
        doc="Winograd output transform of a 3x3 conv's tiles (the winograd pass makes it).",
    )
)

__all__ = [
    "TILE_SIZES",
    "Transforms",
    "WinogradInputAttrs",
    "WinogradOutputAttrs",
    "input_geometry",
    "input_patches",
    "nonzero_terms",
    "tile_counts",
    "tiled_padding",
    "transform_weight",
    "transforms",
]
