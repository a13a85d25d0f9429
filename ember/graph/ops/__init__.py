"""Graph ops: the registry plus one module per family, imported here to register them.

Families: `math` (elementwise and broadcasting), `nn` (conv, pooling, normalisation,
dense/matmul, softmax, resize), `tensor` (reshape, transpose, concat, slice, gather,
pad, ... and reductions), `sparse` (block-sparse dense), `packed` (ops reading weights
re-laid out at build time), `quantized` (int8), `winograd` (the transforms of a 3x3
conv computed by Winograd's algorithm). Every op has a NumPy reference
implementation: together they are the reference interpreter's semantics.
"""

from __future__ import annotations

import importlib

from ember.graph.ops.registry import (
    OpDef,
    OpPattern,
    all_ops,
    evaluate,
    get_op,
    infer_types,
    node_macs,
    register_op,
)

# Op families register themselves on import; a family not written yet is simply absent.
for _family in ("math", "nn", "tensor", "reduce", "sparse", "packed", "quantized", "winograd"):
    try:
        importlib.import_module(f"ember.graph.ops.{_family}")
    except ModuleNotFoundError as error:
        if error.name != f"ember.graph.ops.{_family}":
            raise

__all__ = [
    "OpDef",
    "OpPattern",
    "all_ops",
    "evaluate",
    "get_op",
    "infer_types",
    "node_macs",
    "register_op",
]
