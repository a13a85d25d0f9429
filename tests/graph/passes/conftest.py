"""Shared checks for the graph-pass tests: golden text, verify, and equal results."""

from __future__ import annotations

import textwrap
from collections.abc import Callable, Mapping

import numpy as np
import pytest
from graph_parts import random_inputs

from ember.graph import Graph, Params, format_graph, interpret, verify
from ember.testing.oracle import ATOL, RTOL, assert_allclose

PassFn = Callable[..., tuple[Graph, Params]]


def run_pass(
    pass_fn: PassFn,
    graph: Graph,
    params: Mapping[str, np.ndarray],
    *args: object,
    expected: str | None = None,
    rtol: float = RTOL,
    atol: float = ATOL,
    **kwargs: object,
) -> tuple[Graph, Params]:
    """Run a pass and check what every pass promises: its inputs are untouched, the
    result verifies, prints as `expected` (if given), and computes the same outputs
    under the same names as the original on random inputs."""
    before_text = format_graph(graph)
    before_params = {name: np.array(array, copy=True) for name, array in params.items()}
    new_graph, new_params = pass_fn(graph, params, *args, **kwargs)
    assert format_graph(graph) == before_text, "the pass modified its input graph"
    assert params.keys() == before_params.keys(), "the pass modified its params dict"
    for name, array in before_params.items():
        np.testing.assert_array_equal(params[name], array, err_msg=f"param {name} modified")
    verify(new_graph, new_params)
    if expected is not None:
        assert format_graph(new_graph) == textwrap.dedent(expected).strip()
    inputs = random_inputs(graph)
    want = interpret(graph, params, inputs)
    got = interpret(new_graph, new_params, inputs)
    assert_allclose(got, want, rtol=rtol, atol=atol)
    return new_graph, new_params


@pytest.fixture
def check_pass() -> Callable[..., tuple[Graph, Params]]:
    return run_pass
