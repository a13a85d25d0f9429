"""read_through: golden before/after graphs for both rewrites, and where they stop."""

from __future__ import annotations

import numpy as np

from ember.graph import GraphBuilder
from ember.graph.ir import Graph, Params
from ember.graph.ops.attrs import ReshapeAttrs, SliceAttrs, SplitAttrs, TransposeAttrs
from ember.graph.passes import read_through


def split_in_three(output_shared: bool = False, other_reader: bool = False) -> tuple[Graph, Params]:
    """Attention's split of a fused projection (5 tokens, 3 x 4 channels) into q, k
    and v: one reshape / transpose / reshape chain read by three slices."""
    b = GraphBuilder()
    x = b.input("x", (5, 1, 12))
    r = b.add("reshape", [x], ReshapeAttrs((1, 5, 1, 3, 4)), name="r")
    t = b.add("transpose", [r], TransposeAttrs((3, 1, 2, 0, 4)), name="t")
    s = b.add("reshape", [t], ReshapeAttrs((3, 5, 1, 4)), name="s")
    outputs = []
    for i in range(3):
        window = SliceAttrs((i, 0, 0, 0), (i + 1, 5, 1, 4), (1, 1, 1, 1))
        piece = b.add("slice", [s], window, name=f"p{i}")
        head = b.add("reshape", [piece], ReshapeAttrs((5, 4)), name=f"h{i}")
        outputs.append(b.add("relu", [head], name=f"y{i}"))
    if other_reader:
        outputs.append(b.add("exp", [s], name="e"))
    if output_shared:
        outputs.append(s)
    return b.build(outputs)


def test_a_layout_chain_read_by_layout_ops_alone_is_copied_per_reader(check_pass) -> None:
    graph, params = split_in_three()
    check_pass(
        read_through,
        graph,
        params,
        expected="""
        graph main(%x: float32[5, 1, 12]) -> (%y0: float32[5, 4], %y1: float32[5, 4], %y2: float32[5, 4]) {
          %r = reshape(%x) {shape=[1, 5, 1, 3, 4]} : float32[1, 5, 1, 3, 4]
          %r_1 = reshape(%x) {shape=[1, 5, 1, 3, 4]} : float32[1, 5, 1, 3, 4]
          %r_2 = reshape(%x) {shape=[1, 5, 1, 3, 4]} : float32[1, 5, 1, 3, 4]
          %t = transpose(%r) {perm=[3, 1, 2, 0, 4]} : float32[3, 5, 1, 1, 4]
          %t_1 = transpose(%r_1) {perm=[3, 1, 2, 0, 4]} : float32[3, 5, 1, 1, 4]
          %t_2 = transpose(%r_2) {perm=[3, 1, 2, 0, 4]} : float32[3, 5, 1, 1, 4]
          %s = reshape(%t) {shape=[3, 5, 1, 4]} : float32[3, 5, 1, 4]
          %s_1 = reshape(%t_1) {shape=[3, 5, 1, 4]} : float32[3, 5, 1, 4]
          %s_2 = reshape(%t_2) {shape=[3, 5, 1, 4]} : float32[3, 5, 1, 4]
          %p0 = slice(%s) {begins=[0, 0, 0, 0], ends=[1, 5, 1, 4], steps=[1, 1, 1, 1]} : float32[1, 5, 1, 4]
          %h0 = reshape(%p0) {shape=[5, 4]} : float32[5, 4]
          %y0 = relu(%h0) : float32[5, 4]
          %p1 = slice(%s_1) {begins=[1, 0, 0, 0], ends=[2, 5, 1, 4], steps=[1, 1, 1, 1]} : float32[1, 5, 1, 4]
          %h1 = reshape(%p1) {shape=[5, 4]} : float32[5, 4]
          %y1 = relu(%h1) : float32[5, 4]
          %p2 = slice(%s_2) {begins=[2, 0, 0, 0], ends=[3, 5, 1, 4], steps=[1, 1, 1, 1]} : float32[1, 5, 1, 4]
          %h2 = reshape(%p2) {shape=[5, 4]} : float32[5, 4]
          %y2 = relu(%h2) : float32[5, 4]
        }
        """,  # noqa: E501
    )


def test_a_layout_op_read_by_other_ops_or_output_stays_shared(check_pass) -> None:
    # `s` read by an exp too: it is stored anyway, so its readers keep reading it.
    graph, params = split_in_three(other_reader=True)
    new_graph, _ = check_pass(read_through, graph, params)
    assert [node.op for node in new_graph.nodes] == [node.op for node in graph.nodes]
    graph, params = split_in_three(output_shared=True)
    new_graph, _ = check_pass(read_through, graph, params)
    assert [node.op for node in new_graph.nodes] == [node.op for node in graph.nodes]


def dense_then_reshape(last: int = 3, readers: int = 1) -> tuple[Graph, Params]:
    """A dense on rows (6, 4) with a bias, reshaped to (1, 6, 3) for a residual add (as
    torch's attention writes its output projection)."""
    b = GraphBuilder()
    x = b.input("x", (6, 4))
    w = b.param("w", np.arange(12, dtype="float32").reshape(3, 4))
    dense = b.add("dense", [x, w], name="d")
    biased = b.add("add", [dense, b.param("bias", np.ones((3,), "float32"))], name="a")
    shape = (1, 6, 3) if last == 3 else (1, 2, 9)
    reshaped = b.add("reshape", [biased], ReshapeAttrs(shape), name="r")
    y = b.add("add", [reshaped, b.input("res", shape)], name="y")
    outputs = [y] + [b.add("exp", [biased], name=f"e{i}") for i in range(readers - 1)]
    return b.build(outputs)


def test_a_reshape_of_a_dense_keeping_its_last_axis_moves_in_front(check_pass) -> None:
    graph, params = dense_then_reshape()
    check_pass(
        read_through,
        graph,
        params,
        expected="""
        graph main(%x: float32[6, 4], %res: float32[1, 6, 3]) -> (%y: float32[1, 6, 3]) {
          param %w: float32[3, 4]
          param %bias: float32[3]
          %r_1 = reshape(%x) {shape=[1, 6, 4]} : float32[1, 6, 4]
          %d_1 = dense(%r_1, %w) : float32[1, 6, 3]
          %r = add(%d_1, %bias) : float32[1, 6, 3]
          %y = add(%r, %res) : float32[1, 6, 3]
        }
        """,
    )


def test_a_reshape_of_the_last_axis_or_of_a_shared_dense_stays(check_pass) -> None:
    for graph, params in (dense_then_reshape(last=9), dense_then_reshape(readers=2)):
        new_graph, _ = check_pass(read_through, graph, params)
        assert [node.op for node in new_graph.nodes] == [node.op for node in graph.nodes]


def unbound(reader: str = "reshape") -> tuple[Graph, Params]:
    """timm's `q, k, v = qkv.permute(2, 0, 3, 1, 4).unbind(0)`: a split of the permuted
    projection along its first axis, each piece squeezed."""
    b = GraphBuilder()
    x = b.input("x", (1, 5, 3, 2, 4))
    t = b.add("transpose", [x], TransposeAttrs((2, 0, 3, 1, 4)), name="t")
    pieces = b.add_multi("split", [t], SplitAttrs(0, (1, 1, 1)), name="unbind")
    outputs = []
    for i, piece in enumerate(pieces):
        if reader == "reshape":
            outputs.append(b.add("reshape", [piece], ReshapeAttrs((1, 2, 5, 4)), name=f"h{i}"))
        else:
            outputs.append(b.add("relu", [piece], name=f"h{i}"))
    return b.build(outputs)


def test_a_split_read_by_layout_ops_alone_becomes_slices(check_pass) -> None:
    graph, params = unbound()
    check_pass(
        read_through,
        graph,
        params,
        expected="""
        graph main(%x: float32[1, 5, 3, 2, 4]) -> (%h0: float32[1, 2, 5, 4], %h1: float32[1, 2, 5, 4], %h2: float32[1, 2, 5, 4]) {
          %t = transpose(%x) {perm=[2, 0, 3, 1, 4]} : float32[3, 1, 2, 5, 4]
          %t_1 = transpose(%x) {perm=[2, 0, 3, 1, 4]} : float32[3, 1, 2, 5, 4]
          %t_2 = transpose(%x) {perm=[2, 0, 3, 1, 4]} : float32[3, 1, 2, 5, 4]
          %unbind:0 = slice(%t) {begins=[0, 0, 0, 0, 0], ends=[1, 1, 2, 5, 4], steps=[1, 1, 1, 1, 1]} : float32[1, 1, 2, 5, 4]
          %unbind:1 = slice(%t_1) {begins=[1, 0, 0, 0, 0], ends=[2, 1, 2, 5, 4], steps=[1, 1, 1, 1, 1]} : float32[1, 1, 2, 5, 4]
          %unbind:2 = slice(%t_2) {begins=[2, 0, 0, 0, 0], ends=[3, 1, 2, 5, 4], steps=[1, 1, 1, 1, 1]} : float32[1, 1, 2, 5, 4]
          %h0 = reshape(%unbind:0) {shape=[1, 2, 5, 4]} : float32[1, 2, 5, 4]
          %h1 = reshape(%unbind:1) {shape=[1, 2, 5, 4]} : float32[1, 2, 5, 4]
          %h2 = reshape(%unbind:2) {shape=[1, 2, 5, 4]} : float32[1, 2, 5, 4]
        }
        """,  # noqa: E501
    )


def test_a_split_with_other_readers_stays(check_pass) -> None:
    graph, params = unbound(reader="relu")
    new_graph, _ = check_pass(read_through, graph, params)
    assert [node.op for node in new_graph.nodes] == ["transpose", "split", "relu", "relu", "relu"]
