"""The vectorize pass: each case runs before and after through the loop interpreter, and
checks whether the loop became vector code or fell back to a serial loop."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from ember.loop.interpret import run_func
from ember.loop.ir import (
    Allocate,
    Broadcast,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    Stmt,
    Store,
    seq,
    walk_stmts,
)
from ember.loop.vectorize import (
    add,
    flatten_index,
    lane_of,
    multiply,
    subtract,
    vectorize,
)
from ember.te.expr import Binary, BinaryOp, Const, Expr, Select, Var, call, cast, maximum, select
from ember.te.visit import walk

i, j, k, v = Var("i"), Var("j"), Var("k"), Var("v")
F32 = "float32"


def zero() -> Const:
    return Const(0.0, F32)


def loop(var: Var, extent: int, body: Stmt, kind: ForKind = ForKind.SERIAL) -> For:
    return For(var, Const(extent), kind, body)


def vloop(var: Var, extent: int, body: Stmt) -> For:
    return loop(var, extent, body, ForKind.VECTORIZED)


def kinds(stmt: Stmt) -> list[ForKind]:
    found: list[ForKind] = []

    def visit(s: Stmt) -> None:
        match s:
            case For(_, _, kind, body):
                found.append(kind)
                visit(body)
            case Allocate(_, body) | LetStmt(_, _, body):
                visit(body)
            case IfThenElse(_, then_body, else_body):
                visit(then_body)
                if else_body is not None:
                    visit(else_body)
            case _ if hasattr(s, "stmts"):
                for inner in s.stmts:  # type: ignore[attr-defined]
                    visit(inner)

    visit(stmt)
    return found


def vector_stores(stmt: Stmt) -> list[Store]:
    vector = (Ramp, Broadcast)
    return [
        s
        for s in walk_stmts(stmt)
        if isinstance(s, Store) and any(isinstance(n, vector) for e in s.indices for n in walk(e))
    ]


def random_args(func: PrimFunc, seed: int = 0) -> list[np.ndarray]:
    rng = np.random.default_rng(seed)
    arrays = []
    for buffer in func.args:
        if buffer.dtype == "bool":
            arrays.append(rng.random(buffer.shape) < 0.5)
        elif buffer.dtype.startswith("int"):
            arrays.append(rng.integers(-20, 20, buffer.shape).astype(buffer.dtype))
        else:
            arrays.append(rng.standard_normal(buffer.shape).astype(buffer.dtype))
    return arrays


def check_same(func: PrimFunc, vectorized: bool) -> PrimFunc:
    """Run `func` before and after the pass; assert equal outputs and the outcome."""
    after = vectorize(func)
    expected, actual = random_args(func), random_args(func)
    run_func(func, expected)
    run_func(after, actual)
    for want, got in zip(expected, actual, strict=True):
        np.testing.assert_array_equal(got, want)
    assert ForKind.VECTORIZED not in kinds(after.body)
    assert bool(vector_stores(after.body)) == vectorized, str(after)
    return after


def elementwise(n: int = 16) -> PrimFunc:
    a, b, c = Buffer("A", (4, n), F32), Buffer("B", (n,), F32), Buffer("C", (4, n), F32)
    value = maximum(Load(a, (i, j)) + Load(b, (j,)), zero())
    body = loop(i, 4, vloop(j, n, Store(c, (i, j), value)), ForKind.PARALLEL)
    return PrimFunc("add_relu", (a, b, c), body)


def test_elementwise_becomes_contiguous_vector_code() -> None:
    after = check_same(elementwise(), vectorized=True)
    (store,) = vector_stores(after.body)
    assert flatten_index(store.buffer, store.indices) == Ramp(i * 16, 1, 16)
    assert kinds(after.body) == [ForKind.PARALLEL]


@pytest.mark.parametrize("extent", [12, 1, 128])
def test_extent_that_is_not_a_small_power_of_two_stays_serial(extent: int) -> None:
    after = check_same(elementwise(extent), vectorized=False)
    assert kinds(after.body) == [ForKind.PARALLEL, ForKind.SERIAL]


def predicated_loads(stmt: Stmt) -> list[Load]:
    return [
        node
        for s in walk_stmts(stmt)
        if isinstance(s, Store)
        for e in (s.value, *s.indices)
        for node in walk(e)
        if isinstance(node, Load) and node.predicate is not None
    ]


def test_tail_guard_depending_on_the_lane_versions_the_loop() -> None:
    # The last vector would read A past its end, so no lane may run speculatively:
    # whole vectors run vector code with no test, the tail vector code whose load
    # reads and whose store writes only the lanes < 37 (the interpreter checks every
    # access it makes against the buffer's bounds).
    a, c = Buffer("A", (37,), F32), Buffer("C", (37,), F32)
    index = i * 16 + v
    guarded = IfThenElse(index < 37, Store(c, (index,), Load(a, (index,)) * 2.0))
    after = check_same(PrimFunc("tail", (a, c), loop(i, 3, vloop(v, 16, guarded))), True)
    assert kinds(after.body) == [ForKind.SERIAL]
    versioned = after.body.body  # type: ignore[attr-defined]
    assert isinstance(versioned, IfThenElse)
    assert versioned.condition == (i * 16 < 22)  # lanes 0 and 15 in: i * 16 + 15 < 37
    assert vector_stores(versioned.then_body) and not predicated_loads(versioned.then_body)
    (store,) = vector_stores(versioned.else_body)
    (load,) = predicated_loads(versioned.else_body)
    assert store.predicate is not None and load.predicate == store.predicate
    assert [lane_of(load.predicate, n) for n in (0, 15)] == [i * 16 < 37, i * 16 + 15 < 37]


def test_tail_under_different_tests_runs_serially() -> None:
    # Two tests of the lane: a load masked by one could feed lanes the other keeps.
    a, c = Buffer("A", (37,), F32), Buffer("C", (37,), F32)
    index = i * 16 + v
    value = select(index < 30, Load(a, (index,)), zero())
    guarded = IfThenElse(index < 37, Store(c, (index,), value + Load(a, (index,))))
    after = check_same(PrimFunc("tail", (a, c), loop(i, 3, vloop(v, 16, guarded))), True)
    versioned = after.body.body  # type: ignore[attr-defined]
    assert isinstance(versioned, IfThenElse)
    assert kinds(versioned.else_body) == [ForKind.SERIAL]


def test_tail_with_a_strided_guarded_store_runs_serially() -> None:
    # C[2 * index] = A[index] for index < 37: a predicated store must be contiguous
    # (code generation writes a vector or its lanes from one base), so the tail is
    # the serial loop, as a whole vector of this store cannot be one either.
    a, c = Buffer("A", (37,), F32), Buffer("C", (80,), F32)
    index = i * 16 + v
    guarded = IfThenElse(index < 37, Store(c, (index * 2,), Load(a, (index,))))
    after = check_same(PrimFunc("tail", (a, c), loop(i, 3, vloop(v, 16, guarded))), True)
    versioned = after.body.body  # type: ignore[attr-defined]
    assert isinstance(versioned, IfThenElse)
    assert kinds(versioned.else_body) == [ForKind.SERIAL]


def test_tail_masks_only_the_loads_its_test_guards() -> None:
    # C[index] = B[index] (B padded to whole vectors) + (index < 37 ? A[index] : 0).
    a, b, c = Buffer("A", (37,), F32), Buffer("B", (48,), F32), Buffer("C", (48,), F32)
    index = i * 16 + v
    value = Load(b, (index,)) + select(index < 37, Load(a, (index,)), zero())
    func = PrimFunc("tail", (a, b, c), loop(i, 3, vloop(v, 16, Store(c, (index,), value))))
    after = check_same(func, True)
    (load,) = predicated_loads(after.body)
    assert load.buffer is a


def test_tail_guard_around_a_safe_value_becomes_a_predicated_store() -> None:
    # The tail of an output row that whole vectors overrun (a padded matmul's store):
    # the value reads a buffer padded to whole vectors, the store only the lanes < 37.
    a, c = Buffer("A", (48,), F32), Buffer("C", (37,), F32)
    index = i * 16 + v
    guarded = IfThenElse(index < 37, Store(c, (index,), Load(a, (index,)) * 2.0))
    after = check_same(PrimFunc("tail", (a, c), loop(i, 3, vloop(v, 16, guarded))), True)
    (store,) = vector_stores(after.body)
    assert store.predicate is not None
    assert [lane_of(store.predicate, n) for n in (0, 15)] == [i * 16 < 37, i * 16 + 15 < 37]
    assert kinds(after.body) == [ForKind.SERIAL]


@pytest.mark.parametrize("test", ["equal", "modulo", "else"])
def test_guard_holding_on_scattered_lanes_falls_back(test: str) -> None:
    # A predicate must hold on one run of lanes (all of them when the first and the last
    # do); == and % tests do not, and a store with an else branch is no tail.
    a, c = Buffer("A", (48,), F32), Buffer("C", (48,), F32)
    index = i * 16 + v
    store = Store(c, (index,), Load(a, (index,)))
    condition = {"equal": Binary(BinaryOp.EQ, index, Const(20)), "modulo": index % 3 < 1}
    if test == "else":
        guarded = IfThenElse(index < 37, store, Store(c, (index,), zero()))
    else:
        guarded = IfThenElse(condition[test], store)
    check_same(PrimFunc("scattered", (a, c), loop(i, 3, vloop(v, 16, guarded))), False)


def test_guard_independent_of_the_lane_is_kept_outside_the_vector() -> None:
    a, c = Buffer("A", (4, 8), F32), Buffer("C", (4, 8), F32)
    body = vloop(v, 8, IfThenElse(i < 3, Store(c, (i, v), Load(a, (i, v)))))
    func = PrimFunc("guard", (a, c), loop(i, 4, body))
    check_same(func, vectorized=True)


def matmul_with_accumulator() -> PrimFunc:
    """C = A @ B with a local 16-wide accumulator and the k loop inside the vector loop."""
    a, b, c = Buffer("A", (3, 5), F32), Buffer("B", (5, 32), F32), Buffer("C", (3, 32), F32)
    acc = Buffer("acc", (16,), F32, "local")
    col = j * 16 + v
    update = Store(acc, (v,), Load(acc, (v,)) + Load(a, (i, k)) * Load(b, (k, col)))
    body = seq(
        Store(acc, (v,), zero()),
        loop(k, 5, update),
        Store(c, (i, col), Load(acc, (v,))),
    )
    return PrimFunc("matmul", (a, b, c), loop(i, 3, loop(j, 2, Allocate(acc, vloop(v, 16, body)))))


def test_matmul_inner_reduction_loop_moves_inside_the_vector() -> None:
    after = check_same(matmul_with_accumulator(), vectorized=True)
    assert kinds(after.body) == [ForKind.SERIAL, ForKind.SERIAL, ForKind.SERIAL]
    a, b, c = random_args(after, 3)
    run_func(after, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-5, atol=1e-5)


def test_store_that_is_the_same_in_every_lane_falls_back() -> None:
    a, total = Buffer("A", (8,), F32), Buffer("total", (1,), F32)
    body = vloop(v, 8, Store(total, (Const(0),), Load(total, (Const(0),)) + Load(a, (v,))))
    check_same(PrimFunc("sum", (a, total), body), vectorized=False)


def test_non_affine_store_index_falls_back() -> None:
    a, c = Buffer("A", (8,), F32), Buffer("C", (64,), F32)
    body = vloop(v, 8, Store(c, (v * v,), Load(a, (v,))))
    check_same(PrimFunc("square_index", (a, c), body), vectorized=False)


def test_read_of_another_lanes_store_falls_back() -> None:
    a, b, c = Buffer("A", (9,), F32), Buffer("B", (9,), F32), Buffer("C", (8,), F32)
    body = vloop(v, 8, seq(Store(b, (v,), Load(a, (v,))), Store(c, (v,), Load(b, (v + 1,)) * 2.0)))
    check_same(PrimFunc("shifted", (a, b, c), body), vectorized=False)


def test_read_of_the_same_lanes_store_is_vectorized() -> None:
    a, b, c = Buffer("A", (8,), F32), Buffer("B", (8,), F32), Buffer("C", (8,), F32)
    body = vloop(v, 8, seq(Store(b, (v,), Load(a, (v,))), Store(c, (v,), Load(b, (v,)) * 2.0)))
    check_same(PrimFunc("chain", (a, b, c), body), vectorized=True)


def grouped_read(group: int) -> PrimFunc:
    """out[i, j*8 + v] = A[i, (j*8 + v) // group * 4 + k]: the first channel of each
    block of `group` output channels (a grouped conv's input), vectorized over v."""
    a, out = Buffer("A", (2, 16), F32), Buffer("out", (2, 16), F32)
    channel = j * 8 + v
    source = Binary(BinaryOp.FLOOR_DIV, channel, Const(group)) * 4 + k
    store = Store(out, (i, channel), Load(a, (i, source)) + Load(a, (i, channel % group)))
    body = loop(i, 2, loop(j, 2, loop(k, 2, vloop(v, 8, store))))
    return PrimFunc("grouped", (a, out), body)


def test_division_of_an_aligned_ramp_is_a_broadcast() -> None:
    """Lanes j*8 .. j*8+7 never straddle a multiple of 8 or 16: the quotient is one
    scalar (a broadcast load, not a gather) and the remainder a contiguous ramp."""
    for group in (8, 16):
        after = check_same(grouped_read(group), vectorized=True)
        (store,) = vector_stores(after.body)
        loads = [n for n in walk(store.value) if isinstance(n, Load)]
        flat = [flatten_index(load.buffer, load.indices) for load in loads]
        assert isinstance(flat[0], Broadcast) and isinstance(flat[1], Ramp), flat


def test_division_of_a_ramp_straddling_blocks_stays_general() -> None:
    after = check_same(grouped_read(4), vectorized=True)
    (store,) = vector_stores(after.body)
    (first, _) = [n for n in walk(store.value) if isinstance(n, Load)]
    assert not isinstance(flatten_index(first.buffer, first.indices), Broadcast | Ramp)


def padded_copy(offset: int) -> PrimFunc:
    """out[v] = (0 <= v - offset < 8) ? A[v - offset] : 0, vectorized over v."""
    a, out = Buffer("A", (8,), F32), Buffer("out", (8,), F32)
    index = v - offset
    inside = Binary(BinaryOp.AND, index >= 0, index < 8)
    body = vloop(v, 8, Store(out, (v,), select(inside, Load(a, (index,)), zero())))
    return PrimFunc("pad", (a, out), body)


def test_lazy_select_that_could_read_out_of_bounds_falls_back() -> None:
    check_same(padded_copy(1), vectorized=False)


def test_select_of_a_reduction_tail_versions_the_loop() -> None:
    # rfactor over a row of 37 in vectors of 8: partial[v] += (ko*8 + v < 37) ? A[ko*8 + v] : 0.
    # Whole vectors add with no select; the last, past the row's end, masks its load.
    a, partial = Buffer("A", (37,), F32), Buffer("partial", (8,), F32)
    index = k * 8 + v
    update = Load(partial, (v,)) + select(index < 37, Load(a, (index,)), zero())
    func = PrimFunc("rf", (a, partial), loop(k, 5, vloop(v, 8, Store(partial, (v,), update))))
    after = check_same(func, vectorized=True)
    versioned = after.body.body  # type: ignore[attr-defined]
    assert isinstance(versioned, IfThenElse)
    assert versioned.condition == (k * 8 < 30)  # lanes 0 and 7 in: k * 8 + 7 < 37
    (store,) = vector_stores(versioned.then_body)
    assert not any(isinstance(n, Select) for n in walk(store.value))
    # The tail: a vector select whose taken branch loads only the lanes < 37.
    (tail,) = vector_stores(versioned.else_body)
    assert tail.predicate is None and len(predicated_loads(versioned.else_body)) == 1


def test_select_with_provably_safe_branches_is_vectorized() -> None:
    check_same(padded_copy(0), vectorized=True)


def test_leaky_relu_select_on_a_vector_condition() -> None:
    a, out = Buffer("A", (16,), F32), Buffer("out", (16,), F32)
    x = Load(a, (v,))
    body = vloop(v, 16, Store(out, (v,), select(x > 0.0, x, x * 0.1)))
    check_same(PrimFunc("leaky_relu", (a, out), body), vectorized=True)


def test_strided_and_gathered_loads() -> None:
    a, b = Buffer("A", (8, 8), F32), Buffer("B", (40,), F32)
    c = Buffer("C", (8, 8), F32)
    # A transposed (stride 8), plus B at v*5 (stride 5) and at v // 2 (a gather).
    value = Load(a, (v, i)) + Load(b, (v * 5,)) + Load(b, (v // 2,))
    func = PrimFunc("gathers", (a, b, c), loop(i, 8, vloop(v, 8, Store(c, (i, v), value))))
    check_same(func, vectorized=True)


def test_let_of_a_lane_dependent_index_stays_affine() -> None:
    a, c = Buffer("A", (4, 8), F32), Buffer("C", (4, 8), F32)
    col = Var("col")
    body = vloop(v, 8, LetStmt(col, v + 0, Store(c, (i, col), Load(a, (i, col)) + 1.0)))
    after = check_same(PrimFunc("let", (a, c), loop(i, 4, body)), vectorized=True)
    (store,) = vector_stores(after.body)
    assert isinstance(store.indices[1], Ramp)


def test_math_calls_casts_and_integer_buffers() -> None:
    a, n = Buffer("A", (16,), F32), Buffer("N", (16,), "int32")
    out, count = Buffer("out", (16,), F32), Buffer("count", (16,), "int32")
    x = Load(a, (v,))
    body = vloop(
        v,
        16,
        seq(
            Store(out, (v,), call("exp", x) + cast(F32, Load(n, (v,))) + cast(F32, v)),
            Store(count, (v,), Load(n, (v,)) // Const(3, "int32") + cast("int32", x > 0.0)),
        ),
    )
    check_same(PrimFunc("mixed", (a, n, out, count), body), vectorized=True)


def test_nested_vectorized_loops_vectorize_the_inner_one() -> None:
    a, c = Buffer("A", (4, 8), F32), Buffer("C", (4, 8), F32)
    body = vloop(i, 4, vloop(v, 8, Store(c, (i, v), Load(a, (i, v)) * 3.0)))
    after = check_same(PrimFunc("nested", (a, c), body), vectorized=True)
    assert kinds(after.body) == [ForKind.SERIAL]


def test_allocate_inside_the_vector_loop_falls_back() -> None:
    a, c = Buffer("A", (8,), F32), Buffer("C", (8,), F32)
    tmp = Buffer("tmp", (1,), F32, "local")
    inner = seq(Store(tmp, (Const(0),), Load(a, (v,))), Store(c, (v,), Load(tmp, (Const(0),))))
    check_same(PrimFunc("alloc", (a, c), vloop(v, 8, Allocate(tmp, inner))), vectorized=False)


def test_functions_without_vector_loops_are_returned_unchanged() -> None:
    a, c = Buffer("A", (8,), F32), Buffer("C", (8,), F32)
    func = PrimFunc("serial", (a, c), loop(v, 8, Store(c, (v,), Load(a, (v,)))))
    assert vectorize(func) is func


def ramp(base: Expr, stride: int = 1) -> Ramp:
    return Ramp(base, stride, 4)


def test_index_algebra_keeps_ramps_affine() -> None:
    assert add(ramp(i), Const(3)) == ramp(i + 3)
    assert add(Const(0), ramp(i)) == ramp(i)
    assert add(ramp(i), ramp(j, 2)) == ramp(i + j, 3)
    assert multiply(ramp(Const(1)), Const(8)) == ramp(Const(8), 8)
    assert multiply(ramp(i, 1), Const(0)) == Broadcast(Const(0), 4)
    assert subtract(Const(10), ramp(i)) == Ramp(Const(10) + (-i), -1, 4)
    assert subtract(ramp(i), ramp(j)) == Broadcast(i + (-j), 4)
    buffer = Buffer("X", (3, 4, 5), F32)
    assert flatten_index(buffer, (i, j, Const(2))) == (i * 4 + j) * 5 + 2
    assert flatten_index(buffer, (i, Const(0), ramp(Const(0)))) == Ramp(i * 4 * 5, 1, 4)
    assert flatten_index(Buffer("s", (), F32), ()) == Const(0)


def index_exprs() -> st.SearchStrategy[Expr]:
    """Integer expressions over the lane `v` and the outer loop `i`."""
    leaves = st.sampled_from([v, i, Const(0), Const(1), Const(3), Const(-2)])

    def combine(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        arithmetic = st.tuples(st.sampled_from(["+", "-", "*"]), children, children)
        by_constant = st.tuples(st.sampled_from(["//", "%"]), children, st.integers(1, 5))
        return st.one_of(
            arithmetic.map(lambda t: {"+": t[1] + t[2], "-": t[1] - t[2], "*": t[1] * t[2]}[t[0]]),
            by_constant.map(lambda t: t[1] // t[2] if t[0] == "//" else t[1] % t[2]),
            st.tuples(children, children).map(lambda t: maximum(t[0], t[1])),
        )

    return st.recursive(leaves, combine, max_leaves=6)


@settings(max_examples=60, deadline=None)
@given(load_index=index_exprs(), store_offset=st.integers(0, 3), stride=st.sampled_from([1, 2]))
def test_vectorized_index_arithmetic_matches_the_scalar_loop(
    load_index: Expr, store_offset: int, stride: int
) -> None:
    """Any index expression of the lane, read through `% 64` so it stays in bounds."""
    a, out = Buffer("A", (64,), F32), Buffer("out", (3, 24), F32)
    value = Load(a, (load_index % 64,)) + cast(F32, load_index)
    store = Store(out, (i, v * stride + store_offset), value)
    check_same(PrimFunc("random_index", (a, out), loop(i, 3, vloop(v, 8, store))), True)
