"""sparse_dense: BSR conversion round trips, reference against dense, types, errors."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import ShapeError
from ember.graph import GraphBuilder, TensorType
from ember.graph.ops import OpPattern, evaluate, get_op, infer_types, node_macs
from ember.graph.ops.sparse import SparseDenseAttrs, bsr_from_dense, dense_from_bsr
from ember.testing.oracle import ATOL, RTOL


def block_sparse_weight(
    shape: tuple[int, int], block_size: tuple[int, int], density: float, seed: int
) -> np.ndarray:
    generator = np.random.default_rng(seed)
    rows, columns = shape[0] // block_size[0], shape[1] // block_size[1]
    mask = generator.random((rows, columns)) < density
    mask = np.kron(mask, np.ones(block_size, dtype=bool))
    return np.where(mask, generator.standard_normal(shape), 0).astype("float32")


@pytest.mark.parametrize(
    ("shape", "block_size", "density"),
    [
        ((8, 6), (1, 1), 0.5),
        ((12, 8), (4, 2), 0.3),
        ((16, 16), (16, 1), 0.5),
        ((6, 9), (2, 3), 0.0),  # no block kept: the output is all zeros
        ((4, 4), (2, 2), 1.0),  # every block kept
    ],
)
def test_reference_matches_dense(
    shape: tuple[int, int], block_size: tuple[int, int], density: float
) -> None:
    weight = block_sparse_weight(shape, block_size, density, seed=1)
    data, indices, indptr = bsr_from_dense(weight, block_size)
    attrs = SparseDenseAttrs(shape, block_size)
    np.testing.assert_array_equal(dense_from_bsr(data, indices, indptr, attrs), weight)
    x = np.random.default_rng(2).standard_normal((3, shape[1])).astype("float32")
    (got,) = evaluate("sparse_dense", [x, data, indices, indptr], attrs)
    (want,) = evaluate("dense", [x, weight], get_op("dense").attrs_type())
    assert got.dtype == np.float32 and got.shape == (3, shape[0])
    np.testing.assert_allclose(got, want, rtol=RTOL, atol=ATOL)


def test_bsr_layout_is_row_major_blocks() -> None:
    weight = np.zeros((4, 6), "float32")
    weight[0, 5] = 1.0  # block row 0, block column 2
    weight[3, 0] = 2.0  # block row 1, block column 0
    weight[2, 3] = 3.0  # block row 1, block column 1
    data, indices, indptr = bsr_from_dense(weight, (2, 2))
    assert indptr.tolist() == [0, 1, 3] and indptr.dtype == np.int32
    assert indices.tolist() == [2, 0, 1] and indices.dtype == np.int32
    np.testing.assert_array_equal(data[0], [[0, 1], [0, 0]])
    np.testing.assert_array_equal(data[1], [[0, 0], [2, 0]])
    np.testing.assert_array_equal(data[2], [[0, 3], [0, 0]])


def test_duplicate_blocks_in_a_row_accumulate() -> None:
    attrs = SparseDenseAttrs((2, 2), (1, 2))
    data = np.array([[[1, 2]], [[10, 20]], [[3, 4]]], dtype="float32")
    indices = np.array([0, 0, 0], dtype="int32")
    indptr = np.array([0, 2, 3], dtype="int32")
    x = np.array([[1, 1]], dtype="float32")
    (got,) = evaluate("sparse_dense", [x, data, indices, indptr], attrs)
    np.testing.assert_array_equal(got, [[33, 7]])


def test_op_is_an_anchor_counting_only_kept_blocks() -> None:
    weight = block_sparse_weight((32, 16), (4, 4), 0.25, seed=3)
    data, indices, indptr = bsr_from_dense(weight, (4, 4))
    b = GraphBuilder()
    x = b.input("x", (5, 16))
    inputs = [x, b.param("data", data), b.param("indices", indices), b.param("indptr", indptr)]
    y = b.add("sparse_dense", inputs, SparseDenseAttrs((32, 16), (4, 4)))
    graph, _ = b.build([y])
    assert get_op("sparse_dense").pattern is OpPattern.ANCHOR
    assert get_op("sparse_dense").counts_macs
    assert 0 < data.shape[0] < 32
    assert node_macs(graph.nodes[0]) == 5 * data.shape[0] * 4 * 4


def _types(
    x: tuple[int, ...] = (3, 8),
    nnz: int = 2,
    block: tuple[int, int] = (2, 4),
    indptr: int = 3,
    dtype: str = "float32",
    index_dtype: str = "int32",
) -> list[TensorType]:
    return [
        TensorType(x, dtype),
        TensorType((nnz, *block), "float32"),
        TensorType((nnz,), index_dtype),
        TensorType((indptr,), "int32"),
    ]


@pytest.mark.parametrize(
    ("types", "attrs", "message"),
    [
        (_types(x=(3, 7)), SparseDenseAttrs((4, 8), (2, 4)), r"x must be \[M, 8\]"),
        (_types(block=(4, 2)), SparseDenseAttrs((4, 8), (2, 4)), "data must be float32"),
        (_types(indptr=4), SparseDenseAttrs((4, 8), (2, 4)), r"indptr must be int32\[3\]"),
        (_types(index_dtype="int64"), SparseDenseAttrs((4, 8), (2, 4)), "indices must be"),
        (_types(dtype="int32"), SparseDenseAttrs((4, 8), (2, 4)), "floating-point"),
        (_types(), SparseDenseAttrs((5, 8), (2, 4)), "not a whole number of"),
        (_types(), SparseDenseAttrs((4, 8), (0, 4)), "must be positive"),
    ],
)
def test_type_errors_say_what_is_wrong(
    types: list[TensorType], attrs: SparseDenseAttrs, message: str
) -> None:
    with pytest.raises(ShapeError, match=message):
        infer_types("sparse_dense", types, attrs)


def test_inconsistent_index_arrays_are_rejected() -> None:
    attrs = SparseDenseAttrs((4, 4), (2, 2))
    x = np.ones((1, 4), "float32")
    data = np.ones((2, 2, 2), "float32")
    bad_indptr = np.array([0, 2, 1], dtype="int32")
    with pytest.raises(ShapeError, match="indptr must rise from 0 to nnz_blocks=2"):
        evaluate("sparse_dense", [x, data, np.array([0, 1], "int32"), bad_indptr], attrs)
    bad_indices = np.array([0, 2], dtype="int32")
    with pytest.raises(ShapeError, match=r"must lie in \[0, 2\)"):
        evaluate("sparse_dense", [x, data, bad_indices, np.array([0, 1, 2], "int32")], attrs)
