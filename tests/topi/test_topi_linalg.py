"""Dense, matmul (NumPy broadcasting, vectors) and block-sparse dense declarations."""

from __future__ import annotations

import numpy as np
import pytest
from topi_check import random, run_check

from ember.graph.ops.sparse import SparseDenseAttrs, bsr_from_dense
from ember.topi.linalg import pads_columns


def _sparse_case(batch: int, rows: int, columns: int, block: tuple[int, int], density: float):
    rng = np.random.default_rng(5)
    blocks = rng.random((rows // block[0], columns // block[1])) < density
    mask = np.kron(blocks, np.ones(block)).astype(bool)
    weight = np.where(mask, random((rows, columns), seed=4), 0).astype("float32")
    data, indices, indptr = bsr_from_dense(weight, block)
    attrs = SparseDenseAttrs((rows, columns), block)
    inputs = [random((batch, columns), seed=3), data, indices, indptr]
    return pytest.param("sparse_dense", inputs, attrs, id=f"sparse-{block}-{density}")


CASES = [
    pytest.param("dense", [random((3, 7)), random((5, 7), seed=1)], None, id="dense"),
    pytest.param("dense", [random((2, 3, 6)), random((4, 6), seed=1)], None, id="dense-rank3"),
    pytest.param("dense", [random((6,)), random((4, 6), seed=1)], None, id="dense-vector"),
    pytest.param("dense_pack", [random((3, 7)), random((2, 7, 4), seed=1)], None, id="pack"),
    pytest.param(
        "dense_pack", [random((2, 3, 6)), random((3, 6, 8), seed=1)], None, id="pack-rank3"
    ),
    pytest.param("dense_pack", [random((6,)), random((1, 6, 16), seed=1)], None, id="pack-vector"),
    pytest.param("matmul", [random((3, 5)), random((5, 4), seed=1)], None, id="matmul"),
    pytest.param(
        "matmul", [random((2, 1, 3, 5)), random((3, 5, 2), seed=1)], None, id="batch-broadcast"
    ),
    pytest.param("matmul", [random((5,)), random((2, 5, 3), seed=1)], None, id="vector-left"),
    pytest.param("matmul", [random((2, 4, 5)), random((5,), seed=1)], None, id="vector-right"),
    pytest.param("matmul", [random((5,)), random((5,), seed=1)], None, id="dot"),
    pytest.param(
        "matmul", [random((3, 4), "int32"), random((4, 2), "int32", 1)], None, id="matmul-int32"
    ),
    pytest.param(
        "matmul", [random((2, 5, 4)), random((2, 4, 19), seed=1)], None, id="padded-columns"
    ),
    pytest.param("matmul", [random((3, 4)), random((4, 33), seed=1)], None, id="padded-matrix"),
    _sparse_case(3, 8, 12, (2, 3), 0.5),
    _sparse_case(2, 6, 8, (1, 1), 0.3),
    _sparse_case(1, 8, 8, (4, 4), 1.0),
    _sparse_case(2, 4, 6, (2, 2), 0.0),
]


@pytest.mark.parametrize(("op", "inputs", "attrs"), CASES)
def test_matches_reference(op, inputs, attrs) -> None:
    run_check(op, inputs, attrs)


def test_dense_prints_like_the_seed() -> None:
    dag = run_check("dense", [random((1, 8)), random((10, 8))])
    assert str(dag).splitlines()[-1] == (
        "T_matmul_NT(i, j) += (placeholder[i, k]*placeholder[j, k])"
    )
    assert dag.flop_count == 2 * 10 * 8


def test_dense_pack_reads_one_block_of_output_channels() -> None:
    dag = run_check("dense_pack", [random((1, 8)), random((3, 8, 4))])
    assert str(dag).splitlines()[-1] == (
        "T_dense_pack(i, j) += (placeholder[i, k]*placeholder[floordiv(j, 4), k, floormod(j, 4)])"
    )
    assert dag.flop_count == 2 * 12 * 8


def test_batch_matmul_reads_broadcast_batch_axes_at_zero() -> None:
    dag = run_check("matmul", [random((1, 3, 5)), random((4, 5, 2))])
    assert str(dag).splitlines()[-1] == (
        "T_batch_matmul_NN(b0, i, j) += (placeholder[0, i, k]*placeholder[b0, k, j])"
    )


def test_matmul_pads_columns_that_no_vector_width_divides() -> None:
    # Attention's Q.K^T over ViT's 197 tokens: the right operand is padded with zero
    # columns to a multiple of 16, the product runs over them, the output crops.
    dag = run_check("matmul", [random((2, 3, 8)), random((2, 8, 197), seed=1)])
    names = [t.op.name for t in dag.compute_tensors]
    assert names == ["T_matmul_pad", "T_batch_matmul_NN_padded", "T_batch_matmul_NN"]
    assert [t.shape[-1] for t in dag.compute_tensors] == [208, 208, 197]
    # Sixteen columns or fewer, or a multiple of 16, are left as they are.
    for columns in (16, 13, 48):
        dag = run_check("matmul", [random((3, 8)), random((8, columns), seed=1)])
        assert [t.op.name for t in dag.compute_tensors] == ["T_matmul_NN"]


@pytest.mark.parametrize(
    ("shape", "padded"),
    [
        ((2, 8, 197), True),
        ((8, 17), True),
        ((8, 208), False),
        ((8, 16), False),
        ((8, 13), False),
        ((197,), False),
    ],
)
def test_pads_columns_says_what_matmul_pads(shape, padded) -> None:
    """`fuse` asks it whether a matmul copies its right operand (Kᵀ may then be read
    through its transpose); it must agree with the declaration's pad stage."""
    assert pads_columns(shape) is padded
    left = random((3, shape[0] if len(shape) == 1 else shape[-2]))
    dag = run_check("matmul", [left, random(shape, seed=1)])
    assert ("T_matmul_pad" in [t.op.name for t in dag.compute_tensors]) is padded


def test_sparse_dense_guards_each_rows_blocks() -> None:
    weight = np.kron(np.eye(3), np.ones((2, 2))).astype("float32")
    data, indices, indptr = bsr_from_dense(weight, (2, 2))
    attrs = SparseDenseAttrs((6, 6), (2, 2))
    dag = run_check("sparse_dense", [random((2, 6)), data, indices, indptr], attrs)
    text = str(dag)
    assert "tir.if_then_else(((int64(placeholder[floordiv(n, 2)]) + j) < " in text
    # The padded block axis has min(nnz blocks, block columns) = 3 entries.
    assert [a.extent for a in dag.outputs[0].op.reduce_axes] == [3, 2]
