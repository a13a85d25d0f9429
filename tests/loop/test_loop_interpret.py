"""The loop-IR interpreter: C-like scalar semantics, bounds checks, vectors lane by lane."""

import numpy as np
import pytest

from ember.errors import LoopIRError, ShapeError
from ember.loop.interpret import compile_func, evaluate_expr, run_func
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
    Store,
    seq,
)
from ember.te.expr import Binary, BinaryOp, Cast, Const, Var, call, logical_and, select

i, j, k = Var("i"), Var("j"), Var("k")


def loop(var, extent, body, kind=ForKind.SERIAL):
    return For(var, Const(extent), kind, body)


def f32(value):
    return Const(value, "float32")


def test_matmul_matches_numpy():
    a_buf, b_buf = Buffer("A", (5, 3), "float32"), Buffer("B", (3, 4), "float32")
    c_buf = Buffer("C", (5, 4), "float32")
    update = Store(c_buf, (i, j), Load(c_buf, (i, j)) + Load(a_buf, (i, k)) * Load(b_buf, (k, j)))
    body = loop(i, 5, loop(j, 4, seq(Store(c_buf, (i, j), f32(0.0)), loop(k, 3, update))))
    func = PrimFunc("matmul", (a_buf, b_buf, c_buf), body)
    rng = np.random.default_rng(0)
    a, b = rng.standard_normal((5, 3), "float32"), rng.standard_normal((3, 4), "float32")
    c = np.full((5, 4), 7.0, "float32")
    run_func(func, [a, b, c])
    np.testing.assert_allclose(c, a @ b, rtol=1e-6)


def test_float32_arithmetic_stays_float32():
    # (1e8 + 1) - 1e8 is 0 in float32 but 1 in float64.
    x = Var("x", "float32")
    value = evaluate_expr((x + f32(1.0)) - x, {x: np.float32(1e8)})
    assert isinstance(value, np.float32)
    assert value == 0.0


def test_floor_division_and_modulo_follow_python_and_int_div_truncates():
    x = Var("x")
    assert evaluate_expr(x // 4, {x: -7}) == -2
    assert evaluate_expr(x % 4, {x: -7}) == 1
    assert evaluate_expr(x // -4, {x: 7}) == -2
    assert evaluate_expr(x % -4, {x: 7}) == -1
    assert evaluate_expr(Binary(BinaryOp.DIV, x, Const(2)), {x: -7}) == -3
    assert evaluate_expr(Binary(BinaryOp.DIV, x, Const(2)), {x: 7}) == 3


def test_integer_division_by_zero_is_reported():
    x = Var("x")
    with pytest.raises(LoopIRError, match="division by zero"):
        evaluate_expr(Const(3) // x, {x: 0})


def test_casts_truncate_toward_zero_and_wrap():
    x = Var("x", "float32")
    assert evaluate_expr(Cast("int64", x), {x: np.float32(-2.7)}) == -2
    n = Var("n")
    wrapped = evaluate_expr(Cast("int8", n), {n: 200})
    assert wrapped == -56 and isinstance(wrapped, np.int8)


def test_math_call_in_buffer_dtype():
    x = Var("x", "float32")
    value = evaluate_expr(call("exp", x), {x: np.float32(1.0)})
    assert isinstance(value, np.float32)
    assert value == np.exp(np.float32(1.0))
    assert evaluate_expr(call("erf", x), {x: np.float32(0.5)}) == np.float32(0.5204998778)


def test_select_is_lazy_so_a_guarded_read_may_be_out_of_bounds():
    a_buf, out_buf = Buffer("A", (4,), "float32"), Buffer("B", (8,), "float32")
    guarded = select(i < 4, Load(a_buf, (i,)), f32(-1.0))
    func = PrimFunc("pad", (a_buf, out_buf), loop(i, 8, Store(out_buf, (i,), guarded)))
    out = np.zeros(8, "float32")
    run_func(func, [np.arange(4, dtype="float32"), out])
    np.testing.assert_array_equal(out, [0, 1, 2, 3, -1, -1, -1, -1])


def test_logical_and_short_circuits():
    a_buf = Buffer("A", (4,), "int64")
    guard = logical_and(i < 4, Binary(BinaryOp.EQ, Load(a_buf, (i,)), Const(2)))
    value = evaluate_expr(guard, {i: 9}, {a_buf: np.arange(4)})
    assert not value


def test_out_of_bounds_load_names_buffer_and_index():
    a_buf, out_buf = Buffer("A", (4, 3), "float32"), Buffer("B", (4,), "float32")
    body = loop(i, 4, Store(out_buf, (i,), Load(a_buf, (i, i))))
    func = PrimFunc("diag", (a_buf, out_buf), body)
    with pytest.raises(LoopIRError, match=r"buffer 'A' at index \[3, 3\]; its shape is \[4, 3\]"):
        run_func(func, [np.zeros((4, 3), "float32"), np.zeros(4, "float32")])


def test_negative_index_store_is_out_of_bounds():
    out_buf = Buffer("B", (4,), "float32")
    func = PrimFunc("shift", (out_buf,), loop(i, 4, Store(out_buf, (i - 1,), f32(1.0))))
    with pytest.raises(LoopIRError, match=r"buffer 'B' at index \[-1\]"):
        run_func(func, [np.zeros(4, "float32")])


def test_allocation_starts_as_nan_so_reads_before_writes_show():
    out_buf, tmp = Buffer("B", (4,), "float32"), Buffer("T", (4,), "float32", "local")
    body = Allocate(
        tmp,
        seq(
            loop(i, 2, Store(tmp, (i,), f32(1.0))),
            loop(i, 4, Store(out_buf, (i,), Load(tmp, (i,)))),
        ),
    )
    out = np.zeros(4, "float32")
    run_func(PrimFunc("partial", (out_buf,), body), [out])
    assert out[:2].tolist() == [1.0, 1.0]
    assert np.isnan(out[2:]).all()


def test_every_loop_kind_runs_and_if_then_else_branches():
    out_buf = Buffer("B", (3, 4), "int64")
    branch = IfThenElse(i < j, Store(out_buf, (i, j), Const(1)), Store(out_buf, (i, j), Const(2)))
    body = loop(i, 3, loop(j, 4, branch, ForKind.VECTORIZED), ForKind.PARALLEL)
    out = np.zeros((3, 4), "int64")
    run_func(PrimFunc("triangle", (out_buf,), body), [out])
    expected = np.where(np.arange(3)[:, None] < np.arange(4)[None, :], 1, 2)
    np.testing.assert_array_equal(out, expected)


def test_vector_load_and_store_lane_by_lane():
    a_buf, out_buf = Buffer("A", (2, 8), "float32"), Buffer("B", (2, 8), "float32")
    value = Load(a_buf, (Broadcast(i, 4), Ramp(j * 4, 1, 4))) * Broadcast(f32(2.0), 4)
    body = loop(i, 2, loop(j, 2, Store(out_buf, (Broadcast(i, 4), Ramp(j * 4, 1, 4)), value)))
    a, out = np.arange(16, dtype="float32").reshape(2, 8), np.zeros((2, 8), "float32")
    run_func(PrimFunc("double", (a_buf, out_buf), body), [a, out])
    np.testing.assert_array_equal(out, a * 2)


def test_vector_store_reads_every_lane_before_writing():
    a_buf = Buffer("A", (5,), "float32")
    body = Store(a_buf, (Ramp(Const(1), 1, 4),), Load(a_buf, (Ramp(Const(0), 1, 4),)))
    a = np.arange(5, dtype="float32")
    run_func(PrimFunc("shift", (a_buf,), body), [a])
    np.testing.assert_array_equal(a, [0, 0, 1, 2, 3])


def test_vector_select_is_lazy_per_lane_and_let_binds_vectors():
    a_buf, out_buf = Buffer("A", (6,), "float32"), Buffer("B", (8,), "float32")
    lanes = Var("lanes", "int64x8")
    inside = Binary(BinaryOp.LT, lanes, Broadcast(Const(6), 8))
    value = select(inside, Load(a_buf, (lanes,)), Broadcast(f32(0.0), 8))
    body = LetStmt(lanes, Ramp(Const(0), 1, 8), Store(out_buf, (lanes,), value))
    out = np.zeros(8, "float32")
    run_func(PrimFunc("pad", (a_buf, out_buf), body), [np.ones(6, "float32"), out])
    np.testing.assert_array_equal(out, [1, 1, 1, 1, 1, 1, 0, 0])


def test_unbound_variable_and_unknown_buffer_are_errors():
    out_buf, other = Buffer("B", (4,), "int64"), Buffer("C", (4,), "int64")
    with pytest.raises(LoopIRError, match="variable 'j' is used outside"):
        compile_func(PrimFunc("f", (out_buf,), loop(i, 4, Store(out_buf, (j,), Const(0)))))
    with pytest.raises(LoopIRError, match="buffer 'C' is neither an argument"):
        compile_func(PrimFunc("f", (out_buf,), loop(i, 4, Store(other, (i,), Const(0)))))


def test_arguments_are_checked():
    out_buf = Buffer("B", (4,), "float32")
    func = PrimFunc("f", (out_buf,), loop(i, 4, Store(out_buf, (i,), f32(0.0))))
    with pytest.raises(ShapeError, match=r"'B' of kernel 'f' must be float32\[4\], not float64"):
        run_func(func, [np.zeros(4)])
    with pytest.raises(ShapeError, match="takes 1 arrays"):
        run_func(func, [])


def test_hundred_thousand_iterations_run():
    out_buf = Buffer("B", (100, 1000), "int64")
    body = loop(i, 100, loop(j, 1000, Store(out_buf, (i, j), i * 1000 + j)))
    out = np.zeros((100, 1000), "int64")
    run_func(PrimFunc("iota", (out_buf,), body), [out])
    np.testing.assert_array_equal(out.reshape(-1), np.arange(100_000))


def test_vector_comparison_stored_lane_by_lane():
    a_buf, out_buf = Buffer("A", (8,), "float32"), Buffer("M", (8,), "bool")
    lanes = Ramp(Const(0), 1, 8)
    mask = Binary(BinaryOp.LT, Load(a_buf, (lanes,)), Broadcast(f32(3.0), 8))
    out = np.zeros(8, "bool")
    run_func(
        PrimFunc("mask", (a_buf, out_buf), Store(out_buf, (lanes,), mask)),
        [np.arange(8, dtype="float32"), out],
    )
    assert out.tolist() == [True] * 3 + [False] * 5
