"""Block-sparse ops: `sparse_dense`, a dense layer whose weight is stored in BSR form.

BSR (block compressed sparse row) stores a weight `W[N, K]` as a grid of
`(N / bs_r) x (K / bs_c)` blocks of shape `(bs_r, bs_c)`, keeping only the blocks that
are not all zero:

- `data[nnz_blocks, bs_r, bs_c]`: the kept blocks, row of blocks by row of blocks;
- `indices[nnz_blocks]` (int32): the block column of each kept block;
- `indptr[N / bs_r + 1]` (int32): block row `r` owns `data[indptr[r]:indptr[r + 1]]`.

`sparse_dense(x[M, K], data, indices, indptr)` computes `x @ W.T` (like `dense`), but
only the kept blocks cost multiply-adds. The `to_sparse` pass produces it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from ember.errors import ShapeError
from ember.graph.ir import FLOAT_DTYPES, Attrs, TensorType
from ember.graph.ops.conv import accumulation_dtype
from ember.graph.ops.registry import OpDef, OpPattern, register_op

# BSR index arrays are int32, as the C kernels that will read them expect.
INDEX_DTYPE = "int32"


@dataclass(frozen=True, slots=True)
class SparseDenseAttrs(Attrs):
    """The dense shape `(N, K)` of the BSR weight and its block shape `(bs_r, bs_c)`."""

    weight_shape: tuple[int, int]
    block_size: tuple[int, int]

    @property
    def block_rows(self) -> int:
        """Number of block rows, N / bs_r."""
        return self.weight_shape[0] // self.block_size[0]

    @property
    def block_columns(self) -> int:
        """Number of block columns, K / bs_c."""
        return self.weight_shape[1] // self.block_size[1]


def _check_attrs(attrs: SparseDenseAttrs) -> None:
    (rows, columns), (block_rows, block_columns) = attrs.weight_shape, attrs.block_size
    if block_rows <= 0 or block_columns <= 0:
        raise ShapeError(f"sparse_dense: block size {attrs.block_size} must be positive")
    if rows % block_rows or columns % block_columns:
        raise ShapeError(
            f"sparse_dense: weight shape {attrs.weight_shape} is not a whole number of "
            f"{attrs.block_size} blocks; pick a block size that divides it"
        )


def _sparse_dense_infer(
    inputs: Sequence[TensorType], attrs: SparseDenseAttrs
) -> tuple[TensorType, ...]:
    _check_attrs(attrs)
    x, data, indices, indptr = inputs
    rows, columns = attrs.weight_shape
    if x.dtype not in FLOAT_DTYPES:
        raise ShapeError(f"sparse_dense: needs floating-point x, got {x}")
    if x.ndim != 2 or x.shape[1] != columns:
        raise ShapeError(f"sparse_dense: x must be [M, {columns}], got {x}")
    if data.ndim != 3 or data.shape[1:] != attrs.block_size or data.dtype != x.dtype:
        raise ShapeError(
            f"sparse_dense: data must be {x.dtype}[nnz_blocks, "
            f"{attrs.block_size[0]}, {attrs.block_size[1]}], got {data}"
        )
    expected = {
        "indices": (indices, (data.shape[0],)),
        "indptr": (indptr, (attrs.block_rows + 1,)),
    }
    for name, (actual, shape) in expected.items():
        if actual.shape != shape or actual.dtype != INDEX_DTYPE:
            wanted = TensorType(shape, INDEX_DTYPE)
            raise ShapeError(f"sparse_dense: {name} must be {wanted}, got {actual}")
    return (TensorType((x.shape[0], rows), x.dtype),)


def _check_structure(indices: np.ndarray, indptr: np.ndarray, attrs: SparseDenseAttrs) -> None:
    """The index arrays are data, not types, so their consistency is checked here."""
    if indptr[0] != 0 or indptr[-1] != indices.size or np.any(np.diff(indptr) < 0):
        raise ShapeError(
            f"sparse_dense: indptr must rise from 0 to nnz_blocks={indices.size}, "
            f"got {indptr.tolist()}"
        )
    if indices.size and (indices.min() < 0 or indices.max() >= attrs.block_columns):
        raise ShapeError(
            f"sparse_dense: block column indices must lie in [0, {attrs.block_columns})"
        )


def _sparse_dense_reference(
    inputs: Sequence[np.ndarray], attrs: SparseDenseAttrs
) -> tuple[np.ndarray, ...]:
    x, data, indices, indptr = inputs
    _check_structure(indices, indptr, attrs)
    block_rows, block_columns = attrs.block_size
    batch = x.shape[0]
    # x split into column blocks: x_blocks[m, j, c] = x[m, j * bs_c + c].
    x_blocks = x.reshape(batch, attrs.block_columns, block_columns)
    # Like dense, accumulate floats in float64 and round once (see ops/conv.py).
    accumulate = accumulation_dtype(x.dtype)
    # Each kept block multiplies the slice of x under its block column...
    products = np.einsum(
        "mbc,brc->mbr", x_blocks[:, indices, :].astype(accumulate), data.astype(accumulate)
    )
    # ...and adds into its block row; add.at accumulates blocks sharing a row.
    row_of_block = np.repeat(np.arange(attrs.block_rows), np.diff(indptr))
    out = np.zeros((attrs.block_rows, batch, block_rows), dtype=accumulate)
    np.add.at(out, row_of_block, products.swapaxes(0, 1))
    return (out.swapaxes(0, 1).reshape(batch, attrs.weight_shape[0]).astype(x.dtype),)


def _sparse_dense_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: SparseDenseAttrs
) -> int:
    """Only the kept blocks are multiplied: M * nnz_blocks * bs_r * bs_c."""
    x, data = inputs[0], inputs[1]
    return x.shape[0] * data.size


def bsr_from_dense(
    weight: np.ndarray, block_size: tuple[int, int]
) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """`(data, indices, indptr)` of `weight[N, K]`, keeping the blocks with a nonzero."""
    attrs = SparseDenseAttrs((int(weight.shape[0]), int(weight.shape[1])), block_size)
    _check_attrs(attrs)
    block_rows, block_columns = block_size
    # blocks[r, j] is the (bs_r, bs_c) block at block row r, block column j.
    blocks = weight.reshape(
        attrs.block_rows, block_rows, attrs.block_columns, block_columns
    ).swapaxes(1, 2)
    kept = np.any(blocks != 0, axis=(2, 3))
    rows, columns = np.nonzero(kept)  # row-major order, as BSR stores blocks
    indptr = np.zeros(attrs.block_rows + 1, dtype=INDEX_DTYPE)
    np.cumsum(np.count_nonzero(kept, axis=1), out=indptr[1:])
    data = np.ascontiguousarray(blocks[rows, columns])
    return data, columns.astype(INDEX_DTYPE), indptr


def dense_from_bsr(
    data: np.ndarray, indices: np.ndarray, indptr: np.ndarray, attrs: SparseDenseAttrs
) -> np.ndarray:
    """The dense `W[N, K]` that a BSR triple stands for (for tests and debugging)."""
    _check_attrs(attrs)
    _check_structure(indices, indptr, attrs)
    blocks = np.zeros((attrs.block_rows, attrs.block_columns, *attrs.block_size), dtype=data.dtype)
    row_of_block = np.repeat(np.arange(attrs.block_rows), np.diff(indptr))
    np.add.at(blocks, (row_of_block, indices), data)
    return blocks.swapaxes(1, 2).reshape(attrs.weight_shape)


register_op(
    OpDef(
        "sparse_dense",
        OpPattern.ANCHOR,
        _sparse_dense_infer,
        _sparse_dense_reference,
        attrs_type=SparseDenseAttrs,
        min_inputs=4,
        max_inputs=4,
        macs=_sparse_dense_macs,
        counts_macs=True,
        doc="x[M, K] @ W.T for W[N, K] in BSR form (data, indices, indptr).",
    )
)

__all__ = ["INDEX_DTYPE", "SparseDenseAttrs", "bsr_from_dense", "dense_from_bsr"]
