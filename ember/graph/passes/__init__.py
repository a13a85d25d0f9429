"""Graph passes: each a pure function `(graph, params, ...) -> (graph, params)`.

One pass per module; each states its pre- and post-conditions in its docstring.
"""

from __future__ import annotations

from ember.graph.passes.convert_layout import convert_layout
from ember.graph.passes.fold_batch_norm import fold_batch_norm
from ember.graph.passes.fold_constants import fold_constants
from ember.graph.passes.fuse import (
    FusedGraph,
    FusedGroup,
    GroupKind,
    check_fused,
    fuse,
    interpret_fused,
)
from ember.graph.passes.quantized_ops import quantized_ops
from ember.graph.passes.read_through import read_through
from ember.graph.passes.simplify import simplify
from ember.graph.passes.to_sparse import random_block_sparse_params, to_sparse

__all__ = [
    "FusedGraph",
    "FusedGroup",
    "GroupKind",
    "check_fused",
    "convert_layout",
    "fold_batch_norm",
    "fold_constants",
    "fuse",
    "interpret_fused",
    "quantized_ops",
    "random_block_sparse_params",
    "read_through",
    "simplify",
    "to_sparse",
]
