"""`sparse_dense`: a dense layer with a BSR weight (see `ember.graph.ops.sparse`).

Which blocks a row owns is data (`indptr`), but a compute needs static extents. So the
reduction runs over a padded axis `j` of the most blocks any block row can own
(min(nnz_blocks, K / bs_c)), times the block's columns `c`, and a guard keeps only the
row's own blocks:

    T_sparse_dense(i, n) += tir.if_then_else(((indptr[r] + j) < indptr[r + 1]),
        (data[indptr[r] + j, n % bs_r, c]*x[i, indices[indptr[r] + j]*bs_c + c]), 0f)

with r = n // bs_r. The guarded reads are the only ones that may leave the arrays, so
generated code must keep the select lazy (as for padding).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.graph.ir import Attrs, TensorType
from ember.graph.ops.sparse import SparseDenseAttrs
from ember.te import Expr, Tensor, cast, compute, reduce_axis, reduce_sum, select
from ember.te.expr import INDEX_DTYPE
from ember.topi.common import Declaration, scaled, typed


def _sparse_dense(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    assert isinstance(attrs, SparseDenseAttrs)
    x, data, indices, indptr = inputs
    block_rows, block_columns = attrs.block_size
    shape = outputs[0].shape
    most_blocks = min(data.shape[0], attrs.block_columns)
    if most_blocks == 0:  # an all-zero weight
        zero = typed(0, x.dtype)
        return [compute(shape, lambda i, n: zero, "T_sparse_dense", "sparse_dense")]
    j = reduce_axis(most_blocks, "j")
    c = reduce_axis(block_columns, "c")

    def element(i: Expr, n: Expr) -> Expr:
        row = n if block_rows == 1 else n // block_rows
        first = cast(INDEX_DTYPE, indptr[row])
        block = first + j.var
        column = scaled(cast(INDEX_DTYPE, indices[block]), block_columns) + c.var
        within = 0 if block_rows == 1 else n % block_rows
        product = data[block, within, c.var] * x[i, column]
        owned = block < cast(INDEX_DTYPE, indptr[row + 1])
        return reduce_sum(select(owned, product, typed(0, x.dtype)), [j, c])

    return [compute(shape, element, "T_sparse_dense", "sparse_dense")]


DECLARATIONS: dict[str, Declaration] = {"sparse_dense": _sparse_dense}
