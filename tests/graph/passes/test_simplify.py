"""simplify: golden before/after graphs for each rule, and a property test on chains."""

from __future__ import annotations

import importlib
import inspect
import itertools
import math

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.graph import GraphBuilder, format_graph, interpret, verify
from ember.graph.ir import Graph, TensorType, Value
from ember.graph.ops.attrs import AxisAttrs, CastAttrs, ReshapeAttrs, TransposeAttrs
from ember.graph.passes import simplify
from ember.graph.passes.rewrite import make_node
from ember.graph.passes.simplify import RULES


def test_chain_of_no_ops_collapses_to_one_reshape(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t = b.add("transpose", [x], TransposeAttrs((1, 2, 0)))
    t = b.add("transpose", [t], TransposeAttrs((2, 0, 1)))
    r = b.add("reshape", [t], ReshapeAttrs((6, 4)))
    r = b.add("reshape", [r], ReshapeAttrs((24,)))
    i = b.add("identity", [r])
    c = b.add("cast", [i], CastAttrs("float32"))
    y = b.add("multiply", [c, b.constant(np.ones((1,), "float32"))], name="y")
    graph, params = b.build([y])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[2, 3, 4]) -> (%y: float32[24]) {
          %y = reshape(%x) {shape=[24]} : float32[24]
        }
        """,
    )


def test_inverse_transposes_cancel_keeping_the_output_name(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t = b.add("transpose", [x], TransposeAttrs((2, 0, 1)))
    y = b.add("transpose", [t], TransposeAttrs((1, 2, 0)), name="y")
    graph, params = b.build([y])
    # The output would be the graph input itself: an identity keeps the name `y`.
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[2, 3, 4]) -> (%y: float32[2, 3, 4]) {
          %y = identity(%x) : float32[2, 3, 4]
        }
        """,
    )


def test_transpose_with_other_readers_stays_and_the_pair_merges(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3, 4))
    t = b.add("transpose", [x], TransposeAttrs((1, 0, 2)), name="t")
    u = b.add("transpose", [t], TransposeAttrs((0, 2, 1)), name="u")
    v = b.add("relu", [t], name="v")
    graph, params = b.build([u, v])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[2, 3, 4]) -> (%u: float32[3, 4, 2], %v: float32[3, 2, 4]) {
          %t = transpose(%x) {perm=[1, 0, 2]} : float32[3, 2, 4]
          %u = transpose(%x) {perm=[1, 2, 0]} : float32[3, 4, 2]
          %v = relu(%t) : float32[3, 2, 4]
        }
        """,
    )


def test_transpose_of_unit_axes_becomes_reshape_and_merges(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (1, 8, 1, 1))
    t = b.add("transpose", [x], TransposeAttrs((0, 2, 3, 1)))
    y = b.add("reshape", [t], ReshapeAttrs((1, 8)), name="y")
    graph, params = b.build([y])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[1, 8, 1, 1]) -> (%y: float32[1, 8]) {
          %y = reshape(%x) {shape=[1, 8]} : float32[1, 8]
        }
        """,
    )


def test_neutral_constants_are_dropped_unless_they_broadcast(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    zeros = b.param("zeros", np.zeros((3,), "float32"))
    ones = b.param("ones", np.ones((2, 3), "float32"))
    wide_ones = b.param("wide_ones", np.ones((4, 2, 3), "float32"))
    a = b.add("add", [zeros, x], name="a")  # 0 + x -> x
    s = b.add("subtract", [a, zeros], name="s")  # x - 0 -> x
    m = b.add("multiply", [s, ones], name="m")  # x * 1 -> x
    d = b.add("divide", [m, ones], name="d")  # x / 1 -> x
    keep_zero_minus = b.add("subtract", [zeros, d], name="negated")  # 0 - x is not x
    keep_broadcast = b.add("multiply", [d, wide_ones], name="widened")  # changes the shape
    graph, params = b.build([keep_zero_minus, keep_broadcast])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[2, 3]) -> (%negated: float32[2, 3], %widened: float32[4, 2, 3]) {
          param %zeros: float32[3]
          param %wide_ones: float32[4, 2, 3]
          %negated = subtract(%zeros, %x) : float32[2, 3]
          %widened = multiply(%x, %wide_ones) : float32[4, 2, 3]
        }
        """,
    )


# Random inputs include negative bases: NaN from both pow and sqrt.
@pytest.mark.filterwarnings("ignore:invalid value:RuntimeWarning")
def test_powers_of_constant_exponents_become_multiplies_and_roots(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    outputs = [
        b.add("power", [x, b.param(f"e{i}", np.full(shape, e, "float32"))], name=f"p{i}")
        for i, (e, shape) in enumerate(
            [(1, ()), (2, ()), (3, (1,)), (4, (3,)), (0.5, ()), (-1, ()), (-2, ())]
        )
    ]
    mixed = b.add("power", [x, b.param("e_mixed", np.float32([2, 3, 2]))], name="mixed")
    general = b.add("power", [x, b.param("e_general", np.float32(1.5))], name="general")
    wide = b.add("power", [x, b.param("e_wide", np.full((4, 2, 3), 2, "float32"))], name="wide")
    graph, params = b.build([*outputs, mixed, general, wide])
    # Positive bases: the rewritten square roots and powers match NumPy's on them.
    positive = {"x": np.random.default_rng(0).uniform(0.5, 2, (2, 3)).astype("float32")}
    new_graph, _ = check_pass(simplify, graph, params)
    body = format_graph(new_graph).splitlines()
    for line in [
        "%p0 = identity(%x) : float32[2, 3]",
        "%p1 = multiply(%x, %x) : float32[2, 3]",
        "%p2.0 = multiply(%x, %x) : float32[2, 3]",
        "%p2 = multiply(%p2.0, %x) : float32[2, 3]",
        "%p3.0 = multiply(%x, %x) : float32[2, 3]",
        "%p3 = multiply(%p3.0, %p3.0) : float32[2, 3]",
        "%p4 = sqrt(%x) : float32[2, 3]",
        "%p5 = reciprocal(%x) : float32[2, 3]",
        "%p6.0 = multiply(%x, %x) : float32[2, 3]",
        "%p6 = reciprocal(%p6.0) : float32[2, 3]",
        "%mixed = power(%x, %e_mixed) : float32[2, 3]",  # not one exponent
        "%general = power(%x, %e_general) : float32[2, 3]",  # no cheaper form
        "%wide = power(%x, %e_wide) : float32[4, 2, 3]",  # the exponent broadcasts x
    ]:
        assert f"  {line}" in body, line
    got, want = interpret(new_graph, params, positive), interpret(graph, params, positive)
    for name in want:
        np.testing.assert_allclose(got[name], want[name], rtol=3e-7, err_msg=name)


def test_quantize_then_dequantize_stays_float(check_pass) -> None:
    """The round trip through uint8 of a value already rounded and clipped to 0..255
    goes; a cast of a value that may not be an integer, or not clipped into the
    type's range, stays."""
    from ember.graph.ops.attrs import ClipAttrs

    b = GraphBuilder()
    x = b.input("x", (2, 3))
    zero_point = b.param("zp", np.array(3.0, "float32"))
    rounded = b.add("round", [x], name="rounded")
    shifted = b.add("add", [rounded, zero_point], name="shifted")
    clipped = b.add("clip", [shifted], ClipAttrs(0.0, 255.0), name="clipped")
    back = b.add("cast", [b.add("cast", [clipped], CastAttrs("uint8"), name="q")],
                 CastAttrs("float32"), name="dq")  # fmt: skip
    wide = b.add("clip", [shifted], ClipAttrs(0.0, 300.0), name="wide")
    kept_range = b.add("cast", [b.add("cast", [wide], CastAttrs("uint8"), name="q_wide")],
                       CastAttrs("float32"), name="dq_wide")  # fmt: skip
    fraction = b.add("clip", [x], ClipAttrs(0.0, 255.0), name="fraction")
    kept_fraction = b.add("cast", [b.add("cast", [fraction], CastAttrs("uint8"), name="q_frac")],
                          CastAttrs("float32"), name="dq_frac")  # fmt: skip
    graph, params = b.build([back, kept_range, kept_fraction])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[2, 3]) -> (%dq: float32[2, 3], %dq_wide: float32[2, 3], %dq_frac: float32[2, 3]) {
          param %zp: float32[]
          %rounded = round(%x) : float32[2, 3]
          %shifted = add(%rounded, %zp) : float32[2, 3]
          %dq = clip(%shifted) {low=0.0, high=255.0} : float32[2, 3]
          %wide = clip(%shifted) {low=0.0, high=300.0} : float32[2, 3]
          %q_wide = cast(%wide) {dtype="uint8"} : uint8[2, 3]
          %dq_wide = cast(%q_wide) {dtype="float32"} : float32[2, 3]
          %fraction = clip(%x) {low=0.0, high=255.0} : float32[2, 3]
          %q_frac = cast(%fraction) {dtype="uint8"} : uint8[2, 3]
          %dq_frac = cast(%q_frac) {dtype="float32"} : float32[2, 3]
        }
        """,  # noqa: E501
    )


def test_gathers_of_constant_runs_become_slices(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (3, 4, 5))
    g0 = b.add("gather", [x, b.param("first", np.array(0, "int64"))], AxisAttrs(0), name="g0")
    g1 = b.add("gather", [x, b.param("last", np.array(-1, "int64"))], AxisAttrs(1), name="g1")
    g2 = b.add("gather", [x, b.param("odd", np.array([1, 3], "int32"))], AxisAttrs(1), name="g2")
    g3 = b.add("gather", [x, b.param("back", np.array([2, 0], "int64"))], AxisAttrs(2), name="g3")
    graph, params = b.build([g0, g1, g2, g3])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[3, 4, 5]) -> (%g0: float32[4, 5], %g1: float32[3, 5], %g2: float32[3, 2, 5], %g3: float32[3, 4, 2]) {
          param %back: int64[2]
          %g0.0 = slice(%x) {begins=[0, 0, 0], ends=[1, 4, 5], steps=[1, 1, 1]} : float32[1, 4, 5]
          %g0 = reshape(%g0.0) {shape=[4, 5]} : float32[4, 5]
          %g1.0 = slice(%x) {begins=[0, 3, 0], ends=[3, 4, 5], steps=[1, 1, 1]} : float32[3, 1, 5]
          %g1 = reshape(%g1.0) {shape=[3, 5]} : float32[3, 5]
          %g2 = slice(%x) {begins=[0, 1, 0], ends=[3, 4, 5], steps=[1, 2, 1]} : float32[3, 2, 5]
          %g3 = gather(%x, %back) {axis=2} : float32[3, 4, 2]
        }
        """,  # noqa: E501
    )


def test_a_gather_of_a_constant_out_of_range_stays_for_its_run_time_check() -> None:
    b = GraphBuilder()
    x = b.input("x", (3, 4))
    y = b.add("gather", [x, b.param("outside", np.array(7, "int64"))], AxisAttrs(1), name="y")
    graph, params = b.build([y])
    assert [node.op for node in simplify(graph, params)[0].nodes] == ["gather"]


def test_scalar_factors_move_from_matmul_operands_to_its_output(check_pass) -> None:
    b = GraphBuilder()
    q = b.input("q", (2, 3, 4))
    k = b.input("k", (2, 4, 5))
    s1 = b.param("s1", np.array([0.5], "float32"))
    s2 = b.param("s2", np.array(0.25, "float32"))
    wide = b.param("wide", np.full((2, 1, 1), 0.5, "float32"))
    y = b.add("matmul", [b.add("multiply", [q, s1]), b.add("multiply", [s2, k])], name="y")
    # A factor of several elements scales rows differently: it stays.
    z = b.add("matmul", [b.add("multiply", [q, wide]), k], name="z")
    graph, params = b.build([y, z])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%q: float32[2, 3, 4], %k: float32[2, 4, 5]) -> (%y: float32[2, 3, 5], %z: float32[2, 3, 5]) {
          param %s1: float32[1]
          param %s2: float32[]
          param %wide: float32[2, 1, 1]
          %y.0.0 = matmul(%q, %k) : float32[2, 3, 5]
          %y.0 = multiply(%y.0.0, %s2) : float32[2, 3, 5]
          %y = multiply(%y.0, %s1) : float32[2, 3, 5]
          %multiply_2 = multiply(%q, %wide) : float32[2, 3, 4]
          %z = matmul(%multiply_2, %k) : float32[2, 3, 5]
        }
        """,  # noqa: E501
    )


def test_nodes_a_rewrite_adds_get_names_no_node_has(check_pass) -> None:
    # A node named like the name the square would take ("p.0") keeps its own.
    x = Value("x", TensorType((4,), "float32"))
    three = Value("three", TensorType((), "float32"))
    relu = make_node("relu", [x], name="p.0", output_names=["a"])
    cube = make_node("power", [relu.output, three], name="p", output_names=["p"])
    graph = Graph((x,), (cube.output,), (relu, cube), (three,))
    new_graph, _ = check_pass(simplify, graph, {"three": np.float32(3)})
    assert [(n.name, n.op) for n in new_graph.nodes] == [
        ("p.0", "relu"),
        ("p.1", "multiply"),
        ("p", "multiply"),
    ]


def test_a_value_forwarded_from_an_added_node_keeps_the_node(check_pass) -> None:
    # ones ** 3 -> (ones * ones) * ones -> (ones * ones) -> ones: the square, added in
    # the first sweep, is what the second rule forwards.
    b = GraphBuilder()
    x = b.input("x", (4,))
    ones = b.param("ones", np.ones(4, "float32"))
    cube = b.add("power", [ones, b.param("three", np.float32(3))], name="cube")
    graph, params = b.build([b.add("add", [x, cube], name="y")])
    new_graph, _ = check_pass(simplify, graph, params)
    assert [n.op for n in new_graph.nodes] == ["add"]


def test_casts_and_reshapes_that_change_the_type_stay(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (2, 3))
    c = b.add("cast", [x], CastAttrs("float64"), name="c")
    r = b.add("reshape", [c], ReshapeAttrs((3, 2)), name="r")
    t = b.add("transpose", [r], TransposeAttrs((1, 0)), name="t")  # same type, not a no-op
    graph, params = b.build([t])
    before = str(graph)
    new_graph, _ = check_pass(simplify, graph, params)
    assert str(new_graph) == before


def test_two_outputs_forwarded_to_one_value_keep_both_names(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (4,))
    r = b.add("relu", [x], name="r")
    y = b.add("identity", [r], name="y")
    z = b.add("reshape", [r], ReshapeAttrs((4,)), name="z")
    graph, params = b.build([y, z])
    check_pass(
        simplify,
        graph,
        params,
        expected="""
        graph main(%x: float32[4]) -> (%y: float32[4], %z: float32[4]) {
          %y = relu(%x) : float32[4]
          %z = identity(%y) : float32[4]
        }
        """,
    )


def test_dead_nodes_and_unused_params_are_removed(check_pass) -> None:
    b = GraphBuilder()
    x = b.input("x", (3,))
    w = b.param("w", np.arange(3, dtype="float32"))
    y = b.add("add", [x, w], name="y")
    graph, params = b.build([y])
    dead = make_node("exp", [y], name="dead")  # GraphBuilder would drop it already
    graph = graph.replace(nodes=(*graph.nodes, dead))
    new_graph, new_params = check_pass(simplify, graph, params)
    assert [n.op for n in new_graph.nodes] == ["add"]
    assert list(new_params) == ["w"]


def test_every_rule_has_a_comment_line() -> None:
    # The table is the documentation: one rule a line, each with its `# before -> after`.
    # (`ember.graph.passes.simplify` is the function; the module is fetched by name.)
    source = inspect.getsource(importlib.import_module("ember.graph.passes.simplify"))
    table = source[source.index("RULES: tuple[Rule, ...] = (") :]
    lines = [line for line in table.splitlines()[1 : len(RULES) + 1]]
    assert all("Rule(" in line and "  # " in line and "->" in line for line in lines)


# -- property: random chains of reshapes and transposes --------------------------


@st.composite
def chains(draw: st.DrawFn) -> list[tuple[str, tuple[int, ...]]]:
    """A start shape and a list of (op, attribute) steps valid along the chain."""
    shape = tuple(draw(st.lists(st.sampled_from([1, 2, 3]), min_size=1, max_size=4)))
    steps: list[tuple[str, tuple[int, ...]]] = [("input", shape)]
    for _ in range(draw(st.integers(1, 6))):
        if draw(st.booleans()):
            perm = tuple(draw(st.permutations(range(len(shape)))))
            steps.append(("transpose", perm))
            shape = tuple(shape[axis] for axis in perm)
        else:
            shape = _random_factorisation(draw, math.prod(shape))
            steps.append(("reshape", shape))
    return steps


def _random_factorisation(draw: st.DrawFn, size: int) -> tuple[int, ...]:
    """A random shape with `size` elements (sizes here are products of 2s and 3s)."""
    primes = []
    remaining = size
    for prime in (2, 3):
        while remaining % prime == 0:
            primes.append(prime)
            remaining //= prime
    dims = [1] * draw(st.integers(1, 4))
    for prime in primes:
        dims[draw(st.integers(0, len(dims) - 1))] *= prime
    return tuple(dims)


@settings(max_examples=60, deadline=None)
@given(chains())
def test_simplify_preserves_random_reshape_transpose_chains(steps) -> None:
    b = GraphBuilder()
    value = b.input("x", steps[0][1])
    for op, attribute in steps[1:]:
        attrs = TransposeAttrs(attribute) if op == "transpose" else ReshapeAttrs(attribute)
        value = b.add(op, [value], attrs)
    graph, params = b.build([value])
    new_graph, new_params = simplify(graph, params)
    verify(new_graph, new_params)
    x = np.arange(math.prod(steps[0][1]), dtype="float32").reshape(steps[0][1])
    np.testing.assert_array_equal(
        interpret(new_graph, new_params, {"x": x})[value.name],
        interpret(graph, params, {"x": x})[value.name],
    )
    assert [v.name for v in new_graph.outputs] == [value.name]
    # At most one data-moving node is left: chains merge, and a reshape after a
    # transpose, or the reverse, is the only pair no rule can merge.
    ops = [node.op for node in new_graph.nodes]
    assert len(ops) <= len(steps) - 1
    for first, second in itertools.pairwise(ops):
        assert first != second, ops
    assert simplify(new_graph, new_params)[0] == new_graph  # a fixed point
