"""The two transforms of a conv computed by Winograd's algorithm (`ember.graph.ops.winograd`
says what they compute): each transformed or output element is a short signed sum of
the elements its tile's transform row and column reach.

Bᵀ and Aᵀ are mostly zeros, so a row's nonzero columns and coefficients are looked up
(`nonzero_terms`) rather than multiplied through: an element of `winograd_input` sums
2 x 2 terms for F(2x2, 3x3) (16 of the dense product's), one of `winograd_output` 3 x 3.
The lookups are selects on the transform row, an outer axis, so inside the vectorized
loop over channels they are loop-invariant scalars.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import numpy as np

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.winograd import (
    WinogradInputAttrs,
    WinogradOutputAttrs,
    input_geometry,
    nonzero_terms,
    tile_counts,
    tiled_padding,
    transforms,
)
from ember.te import Expr, Tensor, compute, equal, select
from ember.te.expr import INDEX_DTYPE
from ember.topi.common import WINOGRAD_INPUT, WINOGRAD_OUTPUT, Declaration, pad_stage, typed


def _lookup(index: Expr, values: Sequence[int | float], dtype: str) -> Expr:
    """`values[index]` for an index in range: a chain of selects, or the one value."""
    if len(set(values)) == 1:
        return typed(values[0], dtype)
    result: Expr = typed(values[-1], dtype)
    for position in range(len(values) - 2, -1, -1):
        result = select(equal(index, position), typed(values[position], dtype), result)
    return result


def _terms(
    row: Expr, matrix_terms: tuple[list[list[int]], list[list[float]]], dtype: str
) -> list[tuple[Expr, Expr]]:
    """(column, coefficient) of each of a transform row's nonzero terms, as expressions
    of the row index."""
    columns, values = matrix_terms
    width = len(columns[0])
    return [
        (
            _lookup(row, [r[k] for r in columns], INDEX_DTYPE),
            _lookup(row, [r[k] for r in values], dtype),
        )
        for k in range(width)
    ]


def _tile_sum(
    row: Expr,
    column: Expr,
    matrix: np.ndarray,
    dtype: str,
    read: Callable[[Expr, Expr], Expr],
) -> Expr:
    """Σ matrix[row, i] * matrix[column, j] * read(i, j) over the nonzero entries of
    the two rows: one element of `matrix` applied on both sides of a tile."""
    terms = nonzero_terms(matrix)
    columns = _terms(column, terms, dtype)
    total: Expr | None = None
    for i, row_coefficient in _terms(row, terms, dtype):
        for j, column_coefficient in columns:
            term = row_coefficient * column_coefficient * read(i, j)
            total = term if total is None else total + term
    assert total is not None
    return total


def _winograd_input(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, WinogradInputAttrs)
    (x,) = inputs
    dtype, tile = x.dtype, attrs.tile
    points = transforms(tile).points
    _, _, down, across = input_geometry(x.shape, attrs)
    top, left, bottom, right = tiled_padding(x.shape, attrs)
    padded = pad_stage(x, (0, top, left, 0), (0, bottom, right, 0), typed(0, dtype), "pad_temp")

    def element(e: Expr, p: Expr, c: Expr) -> Expr:
        n, tile_row, tile_column = p // (down * across), p % (down * across) // across, p % across

        def read(row: Expr, column: Expr) -> Expr:
            return padded[n, tile_row * tile + row, tile_column * tile + column, c]

        return _tile_sum(e // points, e % points, transforms(tile).input, dtype, read)

    shape = outputs[0].shape
    return [compute(shape, element, "winograd_input", WINOGRAD_INPUT, ["eps", "p", "c"])]


def _winograd_output(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, WinogradOutputAttrs)
    (m,) = inputs
    dtype, tile = m.dtype, attrs.tile
    points = transforms(tile).points
    down, across = tile_counts(attrs.height, attrs.width, tile)

    def element(n: Expr, h: Expr, w: Expr, k: Expr) -> Expr:
        p = (n * down + h // tile) * across + w // tile

        def read(row: Expr, column: Expr) -> Expr:
            return m[row * points + column, p, k]

        return _tile_sum(h % tile, w % tile, transforms(tile).output, dtype, read)

    shape = outputs[0].shape
    return [compute(shape, element, "winograd_output", WINOGRAD_OUTPUT, ["nn", "yy", "xx", "ff"])]


DECLARATIONS: dict[str, Declaration] = {
    "winograd_input": _winograd_input,
    "winograd_output": _winograd_output,
}
