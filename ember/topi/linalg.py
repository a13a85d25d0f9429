"""Dense layers and matrix products.

`dense(x[M, K], W[N, K])` is `T_matmul_NT(i, j) += (x[i, k]*W[j, k])` (the weight is
stored transposed, as in the seed); `dense_pack(x, W[N/b, K, b])` reads the weight
re-laid out in blocks of `b` output channels, `T_dense_pack(i, j) += (x[i, k]*W[floordiv(j,
b), k, floormod(j, b)])`: split `j` by `b` and the weight read is one vector per `k`
(TVM's `dense_pack`). `matmul` follows NumPy: leading batch axes
broadcast (`T_batch_matmul_NN`), and a 1-d operand is a row or column vector whose
axis is dropped from the result. A right operand with more than 16 columns, no
multiple of 16, is padded with zero columns (`T_matmul_pad`) and the product
(`..._padded`) runs over them, so that whole vectors cover every row; the output
stage keeps the first N columns.
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.graph.ir import Attrs, TensorType
from ember.te import Expr, Tensor, compute, reduce_axis, reduce_sum
from ember.topi.common import Declaration, pad_stage, typed

# A right operand (computed at run time) with more columns than this, not a multiple
# of it, is padded to a multiple: whole vectors of 4, 8 or 16 lanes then cover N.
PAD_COLUMNS = 16


def pads_columns(right_shape: Sequence[int]) -> bool:
    """Whether `matmul` copies a right operand of this shape into zero-padded columns
    (`T_matmul_pad`): a matrix with more than PAD_COLUMNS columns, not a multiple."""
    columns = right_shape[-1] if len(right_shape) > 1 else 1
    return columns > PAD_COLUMNS and columns % PAD_COLUMNS != 0


def matrix_axis_names(rank: int) -> list[str]:
    """`i, j` for a matrix, `b0, ..., i, j` with batch axes, `j` for a vector."""
    if rank == 1:
        return ["j"]
    return [f"b{m}" for m in range(rank - 2)] + ["i", "j"]


def _dense(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    x, weight = inputs
    k = reduce_axis(x.shape[-1], "k")
    shape = outputs[0].shape

    def element(*out: Expr) -> Expr:
        return reduce_sum(x[(*out[:-1], k.var)] * weight[out[-1], k.var], k)

    return [compute(shape, element, "T_matmul_NT", "dense", matrix_axis_names(len(shape)))]


def _dense_pack(
    inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]
) -> list[Tensor]:
    x, weight = inputs
    k = reduce_axis(x.shape[-1], "k")
    block = weight.shape[-1]
    shape = outputs[0].shape

    def element(*out: Expr) -> Expr:
        j = out[-1]
        return reduce_sum(x[(*out[:-1], k.var)] * weight[j // block, k.var, j % block], k)

    names = matrix_axis_names(len(shape))
    return [compute(shape, element, "T_dense_pack", "dense_pack", names)]


def _batch_indices(operand: Tensor, out_shape: Sequence[int], batch: Sequence[Expr]) -> list:
    """The batch indices of a matrix operand, broadcast against the output's batch axes
    (aligned from the right; a length-1 axis reads index 0)."""
    own = operand.shape[:-2]
    lead = len(batch) - len(own)
    return [
        0 if extent == 1 and out_shape[lead + m] != 1 else batch[lead + m]
        for m, extent in enumerate(own)
    ]


def _matmul(inputs: Sequence[Tensor], attrs: Attrs, outputs: Sequence[TensorType]) -> list[Tensor]:
    a, b = inputs
    shape = outputs[0].shape
    k = reduce_axis(a.shape[-1], "k")
    batch_rank = len(shape) - (a.ndim > 1) - (b.ndim > 1)
    padded = -b.shape[-1] % PAD_COLUMNS if pads_columns(b.shape) else 0
    if padded:
        # N is no multiple of the widest vector: pad the right operand's columns with
        # zeros (a stage of K x N, 1/M of the product's work) so that the product runs
        # whole vectors over N + padded columns; the output keeps the first N.
        b = pad_stage(b, [0] * b.ndim, [0] * (b.ndim - 1) + [padded], typed(0, b.dtype),
                      "T_matmul_pad")  # fmt: skip

    def element(*out: Expr) -> Expr:
        batch = out[:batch_rank]
        left = (
            a[(*_batch_indices(a, shape, batch), out[batch_rank], k.var)]
            if a.ndim > 1
            else a[k.var]
        )
        right = b[(*_batch_indices(b, shape, batch), k.var, out[-1])] if b.ndim > 1 else b[k.var]
        return reduce_sum(left * right, k)

    name, tag = ("T_batch_matmul_NN", "batch_matmul") if batch_rank else ("T_matmul_NN", "matmul")
    names = [f"b{m}" for m in range(batch_rank)]
    names += ["i"] if a.ndim > 1 else []
    names += ["j"] if b.ndim > 1 else []
    if not padded:
        return [compute(shape, element, name, tag, names)]
    product = compute([*shape[:-1], shape[-1] + padded], element, f"{name}_padded", tag, names)
    return [compute(shape, lambda *out: product[out], name, "matmul_crop", names)]


DECLARATIONS: dict[str, Declaration] = {
    "dense": _dense,
    "dense_pack": _dense_pack,
    "matmul": _matmul,
}
