"""The unroll and register promotion passes: a register tile written out and its
accumulators split into one-vector buffers, checked through the loop interpreter
(the same results before and after) and for the structure the C renderer relies on."""

from __future__ import annotations

import numpy as np
from loop.test_vectorize import loop, random_args  # tests/ is on sys.path (pyproject)

from ember.backend import generate_kernel
from ember.loop.interpret import run_func
from ember.loop.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    LetStmt,
    Load,
    PrimFunc,
    Ramp,
    Seq,
    Stmt,
    Store,
    seq,
    walk_stmts,
)
from ember.loop.registers import MAX_REGISTERS, is_register, promote_registers
from ember.loop.simplify import simplify
from ember.loop.unroll import MAX_UNROLL, unroll_loops
from ember.loop.vectorize import vectorize
from ember.te.expr import Const, Var, maximum
from ember.te.visit import walk

F32 = "float32"
i, k, t, u, v = Var("i"), Var("k"), Var("t"), Var("u"), Var("v")


def matmul_tile(rows: int = 3, vectors: int = 2, lanes: int = 8, kk: int = 5) -> PrimFunc:
    """C = relu(A @ B), a rows x (vectors x lanes) register tile per i: rows and
    vectors unrolled, lanes vectorized, the reduction outside the tile."""
    n = vectors * lanes
    a, b = Buffer("A", (2 * rows, kk), F32), Buffer("B", (kk, n), F32)
    c = Buffer("C", (2 * rows, n), F32)
    acc = Buffer("acc", (rows, n), F32, "local")

    def tile(body: Stmt) -> Stmt:
        lanes_loop = loop(v, lanes, body, ForKind.VECTORIZED)
        return loop(t, rows, loop(u, vectors, lanes_loop, ForKind.UNROLLED), ForKind.UNROLLED)

    column, row = u * lanes + v, i * rows + t
    update = Load(acc, (t, column)) + Load(a, (row, k)) * Load(b, (k, column))
    body = seq(
        tile(Store(acc, (t, column), Const(0.0, F32))),
        loop(k, kk, tile(Store(acc, (t, column), update))),
        tile(Store(c, (row, column), maximum(Load(acc, (t, column)), Const(0.0, F32)))),
    )
    return PrimFunc("matmul", (a, b, c), loop(i, 2, Allocate(acc, body), ForKind.PARALLEL))


def pipeline(func: PrimFunc) -> PrimFunc:
    """What the C backend's passes make of `func` before rendering."""
    return generate_kernel(func, "llvm").func


def check_same(before: PrimFunc, after: PrimFunc) -> None:
    expected, actual = random_args(before), random_args(before)
    run_func(before, expected)
    run_func(after, actual)
    for want, got in zip(expected, actual, strict=True):
        np.testing.assert_array_equal(got, want)


def index_vars(stmt: Stmt) -> set[Var]:
    """Variables in the indices and values of every Store in `stmt`."""
    return {
        sub
        for s in walk_stmts(stmt)
        if isinstance(s, Store)
        for node in (*s.indices, s.value)
        for sub in walk(node)
        if isinstance(sub, Var)
    }


def allocates(stmt: Stmt) -> list[Buffer]:
    return [s.buffer for s in walk_stmts(stmt) if isinstance(s, Allocate)]


def loop_kinds(stmt: Stmt) -> list[ForKind]:
    return [s.kind for s in walk_stmts(stmt) if isinstance(s, For)]


def test_unroll_writes_out_short_unrolled_loops_as_constant_lets() -> None:
    func = matmul_tile()
    unrolled = unroll_loops(func)
    check_same(func, unrolled)
    assert ForKind.UNROLLED not in loop_kinds(unrolled.body)
    # Simplify then folds the lets: the unrolled variables are gone from the indices.
    assert {t, u} <= index_vars(func.body)
    assert {t, u}.isdisjoint(index_vars(simplify(unrolled).body))


def test_unroll_keeps_long_and_variable_loops() -> None:
    a = Buffer("A", (MAX_UNROLL + 1,), F32)
    long_loop = loop(i, MAX_UNROLL + 1, Store(a, (i,), Const(1.0, F32)), ForKind.UNROLLED)
    func = PrimFunc("long", (a,), long_loop)
    assert unroll_loops(func) is func
    short = PrimFunc("short", (a,), loop(i, 3, Store(a, (i,), Const(1.0, F32)), ForKind.UNROLLED))
    body = unroll_loops(short).body
    assert isinstance(body, Seq) and all(isinstance(s, LetStmt) for s in body.stmts)


def test_register_tile_becomes_one_buffer_per_vector() -> None:
    func = matmul_tile(rows=3, vectors=2, lanes=8)
    promoted = pipeline(func)
    check_same(func, promoted)
    parts = allocates(promoted.body)
    assert [p.name for p in parts] == [f"acc_{n}" for n in range(6)]
    assert all(p.shape == (8,) and p.scope == "local" for p in parts)
    # Each is read and written whole, so the renderer declares it as one variable.
    body = promoted.body
    while isinstance(body, For | Allocate):
        body = body.body
    assert all(is_register(p, body) for p in parts)


def test_buffer_indexed_by_a_loop_variable_is_not_promoted() -> None:
    """Without unrolling, the tile's indices are variables: the buffer stays whole."""
    func = matmul_tile()
    promoted = promote_registers(vectorize(simplify(func)))
    assert [p.name for p in allocates(promoted.body)] == ["acc"]
    check_same(func, promoted)


def test_mixed_access_widths_and_large_buffers_are_not_promoted() -> None:
    out = Buffer("out", (8,), F32)
    mixed = Buffer("mixed", (16,), F32, "local")
    body = seq(
        loop(v, 16, Store(mixed, (v,), Const(2.0, F32)), ForKind.VECTORIZED),
        Store(out, (Const(0),), Load(mixed, (Const(3),))),
    )
    func = PrimFunc("mixed", (out,), Allocate(mixed, body))
    promoted = pipeline(func)
    assert [p.name for p in allocates(promoted.body)] == ["mixed"]
    check_same(func, promoted)

    big = Buffer("big", (MAX_REGISTERS + 1,), F32, "local")
    stores = [Store(big, (Const(n),), Const(float(n), F32)) for n in range(MAX_REGISTERS + 1)]
    body = seq(*stores, Store(out, (Const(0),), Load(big, (Const(5),))))
    func = PrimFunc("big", (out,), Allocate(big, body))
    assert [p.name for p in allocates(pipeline(func).body)] == ["big"]


def test_scalar_accumulators_become_scalars() -> None:
    out, a = Buffer("out", (4,), F32), Buffer("A", (4, 6), F32)
    acc = Buffer("acc", (2,), F32, "local")
    row = i * 2 + t

    def rows(body: Stmt) -> Stmt:
        return loop(t, 2, body, ForKind.UNROLLED)

    body = seq(
        rows(Store(acc, (t,), Const(0.0, F32))),
        loop(k, 6, rows(Store(acc, (t,), Load(acc, (t,)) + Load(a, (row, k))))),
        rows(Store(out, (row,), Load(acc, (t,)))),
    )
    func = PrimFunc("row_sums", (a, out), loop(i, 2, Allocate(acc, body)))
    promoted = pipeline(func)
    check_same(func, promoted)
    parts = allocates(promoted.body)
    assert [(p.name, p.shape) for p in parts] == [("acc_0", (1,)), ("acc_1", (1,))]


def test_global_buffers_are_never_promoted() -> None:
    out = Buffer("out", (16,), F32)
    tmp = Buffer("tmp", (16,), F32, "global")
    body = seq(
        loop(v, 16, Store(tmp, (v,), Const(1.0, F32)), ForKind.VECTORIZED),
        loop(v, 16, Store(out, (v,), Load(tmp, (v,))), ForKind.VECTORIZED),
    )
    func = PrimFunc("copy", (out,), Allocate(tmp, body))
    promoted = pipeline(func)
    assert allocates(promoted.body) == [tmp]
    assert not is_register(tmp, body)
    # A whole-vector access of a one-vector local buffer is a register.
    reg = Buffer("reg", (16,), F32, "local")
    whole = Store(reg, (Ramp(Const(0), 1, 16),), Load(out, (Ramp(Const(0), 1, 16),)))
    assert is_register(reg, whole)
