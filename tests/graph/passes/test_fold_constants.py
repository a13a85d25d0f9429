"""fold_constants: golden before/after graphs and the pass's promises."""

from __future__ import annotations

import numpy as np
import pytest

from ember.errors import GraphError
from ember.graph import GraphBuilder
from ember.graph.ops.attrs import SplitAttrs, TransposeAttrs
from ember.graph.passes import fold_constants


def test_subgraph_of_params_becomes_one_param(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    w = b.param("w", np.arange(6, dtype="float32").reshape(3, 2))
    one = b.param("one", np.ones((), "float32"))
    transposed = b.add("transpose", [w], TransposeAttrs((1, 0)), name="w_t")
    shifted = b.add("add", [transposed, one], name="w_shifted")
    y = b.add("multiply", [x, shifted], name="y")
    z = b.add("relu", [y], name="z")
    graph, params = b.build([z])
    _, new_params = check_pass(
        fold_constants,
        graph,
        params,
        expected="""
        graph main(%x: float32[2, 3]) -> (%z: float32[2, 3]) {
          param %w_shifted: float32[2, 3]
          %y = multiply(%x, %w_shifted) : float32[2, 3]
          %z = relu(%y) : float32[2, 3]
        }
        """,
    )
    np.testing.assert_array_equal(new_params["w_shifted"], [[1, 3, 5], [2, 4, 6]])
    assert list(new_params) == ["w_shifted"]


def test_all_outputs_of_a_multi_output_node_fold(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2,))
    w = b.param("w", np.array([1.0, 2.0, 3.0, 4.0], "float32"))
    low, high = b.add_multi("split", [w], SplitAttrs(0, (2, 2)), name="halves")
    y = b.add("add", [x, low], name="y")
    z = b.add("multiply", [y, high], name="z")
    graph, params = b.build([z])
    _, new_params = check_pass(
        fold_constants,
        graph,
        params,
        expected=f"""
        graph main(%x: float32[2]) -> (%z: float32[2]) {{
          param %{low.name}: float32[2]
          param %{high.name}: float32[2]
          %y = add(%x, %{low.name}) : float32[2]
          %z = multiply(%y, %{high.name}) : float32[2]
        }}
        """,
    )
    np.testing.assert_array_equal(new_params[high.name], [3, 4])


def test_a_constant_graph_output_becomes_a_param_under_its_name(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2,))
    c = b.param("c", np.array([4.0, 9.0], "float32"))
    root = b.add("sqrt", [c], name="root")
    y = b.add("add", [x, root], name="y")
    graph, params = b.build([y, root])
    _, new_params = check_pass(
        fold_constants,
        graph,
        params,
        expected="""
        graph main(%x: float32[2]) -> (%y: float32[2], %root: float32[2]) {
          param %root: float32[2]
          %y = add(%x, %root) : float32[2]
        }
        """,
    )
    np.testing.assert_array_equal(new_params["root"], [2, 3])


def test_graph_without_constant_nodes_is_unchanged(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (3,))
    w = b.param("w", np.ones(3, "float32"))
    y = b.add("add", [x, w], name="y")
    graph, params = b.build([y])
    new_graph, new_params = check_pass(fold_constants, graph, params)
    assert new_graph == graph
    assert list(new_params) == ["w"]


def test_missing_param_array_is_reported() -> None:
    b = GraphBuilder()
    x = b.input("x", (3,))
    y = b.add("add", [x, b.param("w", np.ones(3, "float32"))], name="y")
    graph, _ = b.build([y])
    with pytest.raises(GraphError, match="missing: w"):
        fold_constants(graph, {})
