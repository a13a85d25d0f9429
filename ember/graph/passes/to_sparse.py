"""Turn dense layers with block-sparse constant weights into `sparse_dense`.

Also `random_block_sparse_params`, which redraws dense weights with a random block
structure, so that sparse kernels can be tested and benchmarked on the built-in
workloads without a pruned model (what `use_sparse` does in the tuning tutorial).
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np

from ember.errors import GraphError
from ember.graph.ir import Graph, NameSupply, Node, Params, TensorType, Value, prune_params
from ember.graph.ops.sparse import SparseDenseAttrs, bsr_from_dense
from ember.graph.passes.rewrite import make_node

DEFAULT_BLOCK_SIZE = (16, 1)
DEFAULT_SPARSITY_THRESHOLD = 0.8


def to_sparse(
    graph: Graph,
    params: Mapping[str, np.ndarray],
    block_size: tuple[int, int] = DEFAULT_BLOCK_SIZE,
    sparsity_threshold: float = DEFAULT_SPARSITY_THRESHOLD,
) -> tuple[Graph, Params]:
    """Replace `dense(x, weight)` by `sparse_dense(x, data, indices, indptr)` where it pays.

    Pre: `params` holds the arrays of the graph's params.
    Post: each `dense` whose input is 2-D, whose weight `[N, K]` is a param that
    `block_size` divides, and at least `sparsity_threshold` of whose blocks are all
    zero, is a `sparse_dense` reading new BSR params (`<weight>_data`, `_indices`,
    `_indptr`) and producing the same output value; every other node is unchanged;
    params nothing reads any more are dropped; inputs are not modified.
    """
    _check_options(block_size, sparsity_threshold=sparsity_threshold)
    block_size = (int(block_size[0]), int(block_size[1]))
    names = NameSupply.for_graph(graph)
    arrays: Params = {v.name: np.asarray(params[v.name]) for v in graph.params if v.name in params}
    new_params = list(graph.params)
    # Weight name -> its BSR param values, so a weight shared by dense nodes converts once.
    converted: dict[str, list[Value]] = {}
    nodes: list[Node] = []
    for node in graph.nodes:
        weight = node.inputs[1] if node.op == "dense" else None
        if weight is not None and weight.name not in converted:
            bsr = _sparse_enough(node, arrays, block_size, sparsity_threshold)
            if bsr is not None:
                converted[weight.name] = []
                for suffix, array in zip(("data", "indices", "indptr"), bsr, strict=True):
                    value = Value(names.fresh(f"{weight.name}_{suffix}"), TensorType.of(array))
                    arrays[value.name] = array
                    new_params.append(value)
                    converted[weight.name].append(value)
        # A dense of a higher-rank input keeps its weight dense even when the weight
        # converted for another (2-D) dense: sparse_dense takes 2-D inputs only.
        if weight is None or weight.name not in converted or node.inputs[0].type.ndim != 2:
            nodes.append(node)
            continue
        rows, columns = weight.shape
        nodes.append(
            make_node(
                "sparse_dense",
                [node.inputs[0], *converted[weight.name]],
                SparseDenseAttrs((rows, columns), block_size),
                name=node.name,
                output_names=[node.output.name],
            )
        )
    rebuilt = graph.replace(nodes=tuple(nodes), params=tuple(new_params))
    return prune_params(rebuilt, arrays)


def random_block_sparse_params(
    graph: Graph,
    params: Mapping[str, np.ndarray],
    density: float,
    block_size: tuple[int, int] = DEFAULT_BLOCK_SIZE,
    seed: int = 0,
) -> Params:
    """A copy of `params` whose dense weights are redrawn block-sparse.

    Every param weight `[N, K]` of a 2-D `dense` that `block_size` divides gets
    `round(density * blocks)` nonzero blocks at random positions, filled with normal
    values of standard deviation 1/sqrt(K * density) (so outputs keep roughly the
    scale of a dense layer's); other params are passed through. The result is
    deterministic for a given `seed`.
    """
    _check_options(block_size, density=density)
    generator = np.random.default_rng(seed)
    redrawn = dict(params)
    done: set[str] = set()  # a weight shared by several dense nodes is drawn once
    for node in graph.nodes:
        weight = _block_divisible_weight(node, params, block_size)
        if weight is None or node.inputs[1].name in done:
            continue
        done.add(node.inputs[1].name)
        redrawn[node.inputs[1].name] = _random_block_sparse(
            weight.shape, weight.dtype, density, block_size, generator
        )
    return redrawn


def _check_options(block_size: tuple[int, int], **fractions: float) -> None:
    if len(block_size) != 2 or min(block_size) < 1:
        raise GraphError(f"block size {block_size} must be two positive integers (rows, columns)")
    for name, fraction in fractions.items():
        if not 0.0 <= fraction <= 1.0:
            raise GraphError(
                f"{name} is a fraction of blocks and must lie in [0, 1], got {fraction}"
            )


def _block_divisible_weight(
    node: Node, arrays: Mapping[str, np.ndarray], block_size: tuple[int, int]
) -> np.ndarray | None:
    """The weight array of a 2-D `dense` node if it is constant and made of whole
    blocks; else None."""
    if node.op != "dense" or node.inputs[0].type.ndim != 2:
        return None
    weight = arrays.get(node.inputs[1].name)
    if weight is None or weight.ndim != 2:
        return None
    if weight.shape[0] % block_size[0] or weight.shape[1] % block_size[1]:
        return None
    return weight


def _sparse_enough(
    node: Node,
    arrays: Mapping[str, np.ndarray],
    block_size: tuple[int, int],
    sparsity_threshold: float,
) -> tuple[np.ndarray, np.ndarray, np.ndarray] | None:
    """The BSR form of a dense node's weight if at least `sparsity_threshold` of its
    blocks are all zero, else None."""
    weight = _block_divisible_weight(node, arrays, block_size)
    if weight is None:
        return None
    bsr = bsr_from_dense(weight, block_size)
    total_blocks = weight.size // (block_size[0] * block_size[1])
    zero_fraction = 1 - bsr[0].shape[0] / max(total_blocks, 1)
    return bsr if zero_fraction >= sparsity_threshold else None


def _random_block_sparse(
    shape: tuple[int, ...],
    dtype: np.dtype,
    density: float,
    block_size: tuple[int, int],
    generator: np.random.Generator,
) -> np.ndarray:
    rows, columns = shape[0] // block_size[0], shape[1] // block_size[1]
    kept = round(density * rows * columns)
    mask = np.zeros(rows * columns, dtype=bool)
    mask[generator.choice(rows * columns, size=kept, replace=False)] = True
    # Expand the block mask to elements: block (r, c) covers a bs_r x bs_c patch.
    element_mask = np.repeat(
        np.repeat(mask.reshape(rows, columns), block_size[0], 0), block_size[1], 1
    )
    spread = 1.0 / np.sqrt(max(shape[1] * density, 1.0))
    values = generator.standard_normal(shape) * spread
    return np.where(element_mask, values, 0).astype(dtype)
