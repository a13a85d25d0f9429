"""The graph level: IR, op registry, reference interpreter, passes."""

from ember.graph.builder import GraphBuilder
from ember.graph.interpret import interpret
from ember.graph.ir import Attrs, Graph, NoAttrs, Node, Params, TensorType, Value
from ember.graph.printer import format_graph
from ember.graph.verify import verify

__all__ = [
    "Attrs",
    "Graph",
    "GraphBuilder",
    "NoAttrs",
    "Node",
    "Params",
    "TensorType",
    "Value",
    "format_graph",
    "interpret",
    "verify",
]
