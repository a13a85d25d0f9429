"""verify: the structural invariants every graph keeps, and the messages for breaking them."""

from __future__ import annotations

import pytest

from ember.errors import GraphError
from ember.graph import Graph, Node, TensorType, Value, verify


def test_node_names_are_unique() -> None:
    # fuse and the messages of every pass identify nodes by name.
    x, a, b = (Value(name, TensorType((2,), "float32")) for name in "xab")
    twice = Graph(
        (x,), (b,), (Node("relu", (x,), (a,), name="n"), Node("exp", (a,), (b,), name="n"))
    )
    with pytest.raises(GraphError, match=r"node #1 'n' \(exp\) has the name of node #0"):
        verify(twice)
    verify(twice.replace(nodes=(twice.nodes[0], Node("exp", (a,), (b,), name="m"))))
