"""Compute declarations: every graph op as tensor-expression stages, and fused groups as
ComputeDAGs.

`declare(op_name, input_tensors, attrs, output_types)` builds an op's stages;
`group_to_dag(group)` turns a fused group into one ComputeDAG. Stage names follow the
seed's printouts (`pad_temp`, `conv2d_nhwc`, `DepthwiseConv2d`, `T_matmul_NT`,
`T_add`, `T_relu`, `T_softmax_*`, `pool_max`, ...); stage tags say how a stage computes
(`elemwise`, `broadcast`, `injective`, `injective,pad`, `comm_reduce`, or the anchor's
kind: `conv2d_nhwc`, `depthwise_conv2d_nhwc`, `dense`, `matmul`, `pool_max`, ...).
Ops that no compute expresses are listed in `NOT_EXPRESSIBLE` and raise
`NotExpressibleError`.
"""

from ember.topi.from_graph import graph_to_dag, group_to_dag
from ember.topi.registry import (
    DECLARATIONS,
    NOT_EXPRESSIBLE,
    NotExpressibleError,
    declare,
    has_declaration,
)

__all__ = [
    "DECLARATIONS",
    "NOT_EXPRESSIBLE",
    "NotExpressibleError",
    "declare",
    "graph_to_dag",
    "group_to_dag",
    "has_declaration",
]
