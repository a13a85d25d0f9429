"""to_sparse and random_block_sparse_params: golden graphs, thresholds, equal results."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import GraphError
from ember.graph import Graph, GraphBuilder, Params
from ember.graph.ops.sparse import SparseDenseAttrs, dense_from_bsr
from ember.graph.passes import random_block_sparse_params, to_sparse
from ember.testing import get_workload


def two_layer_mlp() -> tuple[Graph, Params]:
    generator = np.random.default_rng(0)
    b = GraphBuilder()
    x = b.input("x", (3, 16))
    w1 = b.param("fc1_weight", generator.standard_normal((32, 16)).astype("float32"))
    hidden = b.add("relu", [b.add("dense", [x, w1], name="fc1")], name="relu")
    w2 = b.param("fc2_weight", generator.standard_normal((10, 32)).astype("float32"))
    y = b.add("dense", [hidden, w2], name="fc2")
    return b.build([y])


def test_sparse_weights_become_bsr_params(check_pass) -> None:
    graph, params = two_layer_mlp()
    sparse_params = random_block_sparse_params(graph, params, 0.25, (4, 2), seed=1)
    new_graph, new_params = check_pass(
        to_sparse,
        graph,
        sparse_params,
        block_size=(4, 2),
        sparsity_threshold=0.7,
        expected="""
        graph main(%x: float32[3, 16]) -> (%fc2: float32[3, 10]) {
          param %fc2_weight: float32[10, 32]
          param %fc1_weight_data: float32[16, 4, 2]
          param %fc1_weight_indices: int32[16]
          param %fc1_weight_indptr: int32[9]
          %fc1 = sparse_dense(%x, %fc1_weight_data, %fc1_weight_indices, %fc1_weight_indptr) {weight_shape=[32, 16], block_size=[4, 2]} : float32[3, 32]
          %relu = relu(%fc1) : float32[3, 32]
          %fc2 = dense(%relu, %fc2_weight) : float32[3, 10]
        }
        """,  # noqa: E501
    )
    # fc2's 10 rows are not a whole number of 4-row blocks, so it stays dense.
    attrs = new_graph.nodes[0].attrs
    assert isinstance(attrs, SparseDenseAttrs)
    bsr = [new_params[f"fc1_weight_{part}"] for part in ("data", "indices", "indptr")]
    np.testing.assert_array_equal(dense_from_bsr(*bsr, attrs), sparse_params["fc1_weight"])


def test_threshold_decides_which_layers_convert(check_pass) -> None:
    graph, params = two_layer_mlp()
    sparse_params = random_block_sparse_params(graph, params, 0.5, (2, 1), seed=2)
    # 50% of the blocks are zero: a 0.6 threshold keeps both layers dense...
    kept, _ = check_pass(to_sparse, graph, sparse_params, (2, 1), 0.6)
    assert [n.op for n in kept.nodes] == ["dense", "relu", "dense"]
    # ...and a 0.5 threshold converts both.
    converted, _ = check_pass(to_sparse, graph, sparse_params, (2, 1), 0.5)
    assert [n.op for n in converted.nodes] == ["sparse_dense", "relu", "sparse_dense"]


def test_dense_weights_of_random_models_stay_dense(check_pass) -> None:
    graph, params = two_layer_mlp()
    _, new_params = check_pass(to_sparse, graph, params, (1, 1), 0.0)
    # A threshold of 0 converts even a fully dense weight: every block is kept.
    assert new_params["fc1_weight_data"].shape == (32 * 16, 1, 1)
    same_graph, _ = check_pass(to_sparse, graph, params, (1, 1), 0.01)
    assert same_graph == graph


def test_random_block_sparse_params_draws_the_requested_structure() -> None:
    graph, params = two_layer_mlp()
    redrawn = random_block_sparse_params(graph, params, 0.25, (8, 4), seed=3)
    weight = redrawn["fc1_weight"]
    blocks = weight.reshape(4, 8, 4, 4).swapaxes(1, 2)
    nonzero = np.any(blocks != 0, axis=(2, 3))
    assert np.count_nonzero(nonzero) == round(0.25 * 16)
    # Kept blocks are dense, the others all zero.
    assert np.all(blocks[nonzero] != 0) and not np.any(blocks[~nonzero])
    assert weight.dtype == np.float32
    # fc2's [10, 32] weight is not a whole number of (8, 4) blocks: passed through.
    assert redrawn["fc2_weight"] is params["fc2_weight"]
    again = random_block_sparse_params(graph, params, 0.25, (8, 4), seed=3)
    np.testing.assert_array_equal(again["fc1_weight"], weight)
    other = random_block_sparse_params(graph, params, 0.25, (8, 4), seed=4)
    assert not np.array_equal(other["fc1_weight"], weight)


@pytest.mark.parametrize(
    ("block_size", "threshold", "message"),
    [
        ((0, 1), 0.5, r"block size \(0, 1\) must be two positive integers"),
        ((4, 1), 1.5, r"sparsity_threshold is a fraction .* \[0, 1\], got 1.5"),
    ],
)
def test_bad_options_are_reported(block_size, threshold, message) -> None:
    graph, params = two_layer_mlp()
    with pytest.raises(GraphError, match=message):
        to_sparse(graph, params, block_size, threshold)
    with pytest.raises(GraphError, match="density is a fraction of blocks"):
        random_block_sparse_params(graph, params, -0.1, (4, 1))


def test_builtin_mlp_with_random_sparse_weights(check_pass) -> None:
    # The tuning tutorial's `use_sparse`: random block-sparse weights, then to_sparse.
    graph, params = get_workload("mlp", image_shape=(1, 8, 8), num_classes=10)
    sparse_params = random_block_sparse_params(graph, params, 0.2, (2, 1), seed=0)
    new_graph, _ = check_pass(to_sparse, graph, sparse_params, (2, 1), 0.75)
    assert graph.op_histogram()["dense"] == new_graph.op_histogram()["sparse_dense"] == 3
    assert "dense" not in new_graph.op_histogram()


def test_weight_shared_by_two_dense_nodes_converts_once(check_pass) -> None:
    weight = np.zeros((4, 4), "float32")
    weight[0, 1] = 2.0
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    w = b.param("w", weight)
    first = b.add("dense", [x, w], name="first")
    second = b.add("dense", [first, w], name="second")
    graph, params = b.build([second])
    new_graph, new_params = check_pass(to_sparse, graph, params, (2, 2), 0.5)
    assert sorted(new_params) == ["w_data", "w_indices", "w_indptr"]
    assert new_graph.nodes[0].inputs[1:] == new_graph.nodes[1].inputs[1:]


def test_shared_weight_stays_dense_for_a_higher_rank_input(check_pass) -> None:
    weight = np.zeros((4, 4), "float32")
    weight[0, 1] = 2.0
    b = GraphBuilder()
    x = b.input("x", (2, 4))
    y = b.input("y", (3, 2, 4))
    w = b.param("w", weight)
    flat = b.add("dense", [x, w], name="flat")
    batched = b.add("dense", [y, w], name="batched")
    graph, params = b.build([flat, batched])
    new_graph, new_params = check_pass(to_sparse, graph, params, (2, 2), 0.5)
    assert [node.op for node in new_graph.nodes] == ["sparse_dense", "dense"]
    assert sorted(new_params) == ["w", "w_data", "w_indices", "w_indptr"]
