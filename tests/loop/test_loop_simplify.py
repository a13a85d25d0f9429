"""The loop-IR simplifier: property tests against the interpreter, golden index
expressions for split/fuse patterns, and statement-level clean-ups.

(Named test_loop_simplify.py: tests/graph/passes/test_simplify.py takes the plain name
and the test tree has no packages.)"""

import importlib

import numpy as np
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from ember.errors import LoopIRError
from ember.loop.analysis import Interval, const_interval, linear_coefficients
from ember.loop.interpret import evaluate_expr, run_func
from ember.loop.ir import (
    Allocate,
    Buffer,
    For,
    ForKind,
    IfThenElse,
    Load,
    PrimFunc,
    Seq,
    Store,
    seq,
)
from ember.loop.simplify import simplify, simplify_expr
from ember.te.expr import (
    Binary,
    BinaryOp,
    Const,
    Select,
    Unary,
    UnaryOp,
    Var,
    logical_and,
    maximum,
    minimum,
    select,
)
from ember.te.printer import format_expr

X, Y, Z = Var("x"), Var("y"), Var("z")
VARS = (X, Y, Z)

# -- property tests ---------------------------------------------------------------------

ARITHMETIC = [BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL, BinaryOp.MIN, BinaryOp.MAX]
DIVISIONS = [BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD]
COMPARISONS = [BinaryOp.LT, BinaryOp.LE, BinaryOp.GT, BinaryOp.GE, BinaryOp.EQ, BinaryOp.NE]
small_constants = st.integers(-20, 20).map(Const)
divisors = st.sampled_from([-7, -4, -1, 1, 2, 3, 4, 7, 8, 16]).map(Const)


def _comparison(operands):
    return st.builds(Binary, st.sampled_from(COMPARISONS), operands, operands)


def _conditions(operands):
    comparison = _comparison(operands)
    return st.one_of(
        comparison,
        st.builds(Binary, st.sampled_from([BinaryOp.AND, BinaryOp.OR]), comparison, comparison),
        st.builds(Unary, st.just(UnaryOp.NOT), comparison),
    )


def _extend(operands):
    return st.one_of(
        st.builds(Binary, st.sampled_from(ARITHMETIC), operands, operands),
        st.builds(Binary, st.sampled_from(DIVISIONS), operands, divisors),
        st.builds(Binary, st.sampled_from(DIVISIONS), operands, operands),
        st.builds(Binary, st.just(BinaryOp.MUL), operands, small_constants),
        st.builds(Unary, st.just(UnaryOp.NEG), operands),
        st.builds(Select, _conditions(operands), operands, operands),
    )


index_exprs = st.recursive(
    st.one_of(st.sampled_from(VARS), small_constants), _extend, max_leaves=14
)
ranges_strategy = st.fixed_dictionaries(
    {var: st.tuples(st.integers(-12, 12), st.integers(1, 24)) for var in VARS}
).map(lambda d: {v: Interval(lo, lo + size - 1) for v, (lo, size) in d.items()})


def _environments(ranges):
    return st.lists(
        st.fixed_dictionaries(
            {v: st.integers(r.lo, r.hi) for v, r in ranges.items()}  # type: ignore[arg-type]
        ),
        min_size=1,
        max_size=6,
    )


def _check_same_values(expr, simplified, environments):
    for env in environments:
        try:
            expected = evaluate_expr(expr, env)
        except LoopIRError:
            continue  # the original divides by zero here
        assert evaluate_expr(simplified, env) == expected, (
            f"{format_expr(expr)} simplified to {format_expr(simplified)} differs at {env}"
        )


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(expr=index_exprs, ranges=ranges_strategy, data=st.data())
def test_simplified_index_expression_has_the_same_value(expr, ranges, data):
    simplified = simplify_expr(expr, ranges)
    _check_same_values(expr, simplified, data.draw(_environments(ranges)))


@settings(max_examples=200, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(condition=_conditions(index_exprs), ranges=ranges_strategy, data=st.data())
def test_simplified_condition_has_the_same_value(condition, ranges, data):
    simplified = simplify_expr(condition, ranges)
    environments = data.draw(_environments(ranges))
    _check_same_values(condition, simplified, environments)


@settings(max_examples=200, deadline=None)
@given(expr=index_exprs, ranges=ranges_strategy, data=st.data())
def test_const_interval_contains_every_value(expr, ranges, data):
    bounds = const_interval(expr, ranges)
    for env in data.draw(_environments(ranges)):
        try:
            value = evaluate_expr(expr, env)
        except LoopIRError:
            continue
        assert bounds.lo is None or bounds.lo <= value
        assert bounds.hi is None or value <= bounds.hi


def test_simplification_that_needs_ranges_does_not_happen_without_them():
    i = Var("i")
    assert format_expr(simplify_expr((X * 4 + i) // 4)) == "(x + floordiv(i, 4))"
    assert format_expr(simplify_expr((X * 4 + i) // 4, {i: 4})) == "x"
    assert format_expr(simplify_expr(minimum(i, 10))) == "min(i, 10)"
    assert format_expr(simplify_expr(minimum(i, 10), {i: 11})) == "i"
    assert format_expr(simplify_expr(minimum(i, 10), {i: 12})) == "min(i, 10)"


# -- golden tests: split / fuse index patterns ------------------------------------------

I0, I1, I2, F = Var("i.0"), Var("i.1"), Var("i.2"), Var("f")


def _golden(expr, ranges=None):
    return format_expr(simplify_expr(expr, ranges))


def test_split_indices_collect_into_row_major_strides():
    assert _golden((I0 * 4 + I1) * 16 + I2) == "(((i.0*64) + (i.1*16)) + i.2)"
    assert _golden(X * 4 + X * 2) == "(x*6)"
    assert _golden(X * 1 + 0) == "x"
    assert _golden(X - X) == "0"
    assert _golden(3 - (X + 1) * 2) == "(1 - (x*2))"


def test_split_then_recover_outer_and_inner():
    ranges = {I0: 8, I1: 4}
    assert _golden((I0 * 4 + I1) // 4, ranges) == "i.0"
    assert _golden((I0 * 4 + I1) % 4, ranges) == "i.1"
    assert _golden((I0 * 16 + I1 * 4) // 8, ranges) == "((i.0*2) + floordiv(i.1, 2))"


def test_fused_index_recombines():
    assert _golden((F // 7) * 7 + F % 7, {F: 49}) == "f"
    assert _golden(((X + 5) // 4) * 4 + (X + 5) % 4) == "(x + 5)"
    assert _golden(((F // 4) % 8) * 4 + F % 4, {F: 64}) == "floormod(f, 32)"


def test_nested_floordiv_and_floormod():
    assert _golden((X // 4) // 8) == "floordiv(x, 32)"
    assert _golden((X % 16) % 4) == "floormod(x, 4)"
    assert _golden(X // 1) == "x"
    assert _golden(X % 1) == "0"
    assert _golden((X * 6 + 4) // 2) == "((x*3) + 2)"
    assert _golden((X * 6 + 3) % 6) == "3"
    assert _golden((X * 6 + Y) % 4) == "floormod(((x*6) + y), 4)"


def test_guards_decided_by_loop_ranges():
    ranges = {I0: 4, I1: 4}
    assert _golden(I0 * 4 + I1 < 16, ranges) == "True"
    assert _golden(I0 * 4 + I1 >= 16, ranges) == "False"
    assert _golden(I0 * 4 + I1 < 10, ranges) == "(((i.0*4) + i.1) < 10)"
    assert _golden(I0 * 4 + I1 + 3 < 10, ranges) == "(((i.0*4) + i.1) < 7)"
    assert _golden(select(I1 < 4, X, Y), ranges) == "x"
    assert _golden(logical_and(I1 < 4, X < 3), ranges) == "(x < 3)"


def test_min_max_and_select_rules():
    assert _golden(minimum(X, X)) == "x"
    assert _golden(maximum(3, X)) == "max(x, 3)"
    assert _golden(minimum(minimum(X, 8), 5)) == "min(x, 5)"
    assert _golden(select(Const(True, "bool"), X, Y)) == "x"
    assert _golden(Unary(UnaryOp.NOT, X < Y)) == "(y <= x)"


def test_float_expressions_get_only_exact_rewrites():
    a, b = Var("a", "float32"), Var("b", "float32")
    one, zero = Const(1.0, "float32"), Const(0.0, "float32")
    assert _golden(a * one) == "a"
    assert _golden(a - zero) == "a"
    assert _golden((a + b) - b) == "((a + b) - b)"  # no reassociation
    assert _golden(a * zero) == "(a*0f)"  # NaN * 0 is NaN
    assert _golden(a + zero) == "(a + 0f)"  # -0.0 + 0.0 is +0.0
    assert _golden(Const(0.1, "float32") + Const(0.2, "float32")) == format_expr(
        Const(float(np.float32(0.1) + np.float32(0.2)), "float32")
    )


def test_linear_coefficients():
    stride, offset = linear_coefficients(simplify_expr((X * 4 + I1) * 16 + 3), I1)
    assert stride == 16 and format_expr(offset) == "((x*64) + 3)"
    assert linear_coefficients(X * 2 + Y, Z) == (0, X * 2 + Y)
    assert linear_coefficients(X // 4 + X, X) is None


# -- statements -------------------------------------------------------------------------


def _loop(var, extent, body, kind=ForKind.SERIAL):
    return For(var, Const(extent), kind, body)


def _run(func, *arrays):
    copies = [a.copy() for a in arrays]
    run_func(func, copies)
    return copies


def test_split_loop_with_always_true_guard_and_unit_loop_is_cleaned():
    src, dst = Buffer("A", (64,), "float32"), Buffer("B", (64,), "float32")
    unit, outer, inner = Var("u"), Var("i.0"), Var("i.1")
    index = (outer * 4 + inner) * 1 + unit
    guarded = IfThenElse(
        index < 64, Store(dst, (index,), Load(src, (index,)) * Const(2.0, "float32"))
    )
    body = _loop(outer, 16, _loop(inner, 4, _loop(unit, 1, guarded)))
    func = PrimFunc("scale", (src, dst), body)
    simple = simplify(func)
    assert str(simple.body) == (
        "for i.0 in 0..16:\n  for i.1 in 0..4:\n    B[((i.0*4) + i.1)] = (A[((i.0*4) + i.1)]*2f)"
    )
    a = np.arange(64, dtype="float32")
    expected = _run(func, a, np.zeros(64, "float32"))
    np.testing.assert_array_equal(_run(simple, a, np.zeros(64, "float32"))[1], expected[1])


def test_tail_guard_stays_and_fused_loop_indices_are_recovered():
    src, dst = Buffer("A", (7, 5), "int64"), Buffer("B", (35,), "int64")
    outer, inner = Var("f.0"), Var("f.1")
    f = outer * 8 + inner
    row, col = f // 5, f % 5
    store = Store(dst, (row * 5 + col,), Load(src, (row, col)) * Const(2))
    body = _loop(outer, 5, _loop(inner, 8, IfThenElse(f < 35, store)))
    func = PrimFunc("fused", (src, dst), body)
    simple = simplify(func)
    assert str(simple.body) == (
        "for f.0 in 0..5:\n"
        "  for f.1 in 0..8:\n"
        "    if (((f.0*8) + f.1) < 35):\n"
        "      B[((f.0*8) + f.1)] = "
        "(A[floordiv(((f.0*8) + f.1), 5), floormod(((f.0*8) + f.1), 5)]*2)"
    )
    a = np.arange(35).reshape(7, 5)
    out = _run(simple, a, np.zeros(35, "int64"))[1]
    np.testing.assert_array_equal(out, a.reshape(-1) * 2)


def test_if_refines_ranges_and_loops_that_never_run_disappear():
    dst = Buffer("B", (8,), "int64")
    i = Var("i")
    inner_guard = IfThenElse(i < 6, Store(dst, (i,), minimum(i, 5)))
    body = seq(
        _loop(i, 8, IfThenElse(i < 4, inner_guard, Store(dst, (i,), Const(-1)))),
        _loop(Var("j"), 0, Store(dst, (Const(0),), Const(9))),
    )
    simple = simplify(body)
    assert str(simple) == ("for i in 0..8:\n  if (i < 4):\n    B[i] = i\n  else:\n    B[i] = -1")
    out = np.zeros(8, "int64")
    run_func(PrimFunc("f", (dst,), simple), [out])
    assert out.tolist() == [0, 1, 2, 3, -1, -1, -1, -1]


def test_decided_if_with_else_and_empty_results():
    dst = Buffer("B", (4,), "int64")
    i = Var("i")
    then, other = Store(dst, (i,), Const(1)), Store(dst, (i,), Const(2))
    assert (
        str(simplify(_loop(i, 4, IfThenElse(i < 9, then, other)))) == "for i in 0..4:\n  B[i] = 1"
    )
    assert (
        str(simplify(_loop(i, 4, IfThenElse(i >= 4, then, other)))) == "for i in 0..4:\n  B[i] = 2"
    )
    assert simplify(_loop(i, 4, IfThenElse(i > 5, then))) == Seq(())
    tmp = Buffer("T", (4,), "int64", "local")
    assert simplify(Allocate(tmp, _loop(i, 4, IfThenElse(i > 5, then)))) == Seq(())


# -- the shared memo ----------------------------------------------------------------------


def test_the_shared_memo_answers_by_the_ranges_of_the_expressions_own_variables() -> None:
    module = importlib.import_module("ember.loop.simplify")  # ember.loop.simplify: the function
    module._MEMO.clear()
    quarter = Binary(BinaryOp.FLOOR_DIV, X, Const(4))
    assert simplify_expr(quarter, {X: 4}) == Const(0)
    assert module._MEMO[quarter, ((X, Interval(0, 3)),)] == Const(0)
    # Another range of x is another answer; a range of a variable it lacks is not.
    assert simplify_expr(quarter, {X: 8}) == quarter
    assert module._MEMO[quarter, ((X, Interval(0, 7)),)] == quarter
    assert simplify_expr(quarter, {X: 4, Y: 100}) == Const(0)
    assert all(Y not in dict(ranges) for _, ranges in module._MEMO)
    # What the memo answered is what a fresh simplification gives.
    module._MEMO.clear()
    assert simplify_expr(quarter, {X: 4, Y: 100}) == Const(0)


def test_the_shared_memo_keeps_reads_and_floats_out() -> None:
    module = importlib.import_module("ember.loop.simplify")  # ember.loop.simplify: the function
    module._MEMO.clear()
    # Equal buffers that are different objects: each read keeps its own.
    first, second = Buffer("A", (8,), "int64"), Buffer("A", (8,), "int64")
    index = X + Const(0)
    for buffer in (first, second):
        read = simplify_expr(Load(buffer, (index,)), {X: 8})
        assert isinstance(read, Load) and read.buffer is buffer and read.indices == (X,)
    # The index inside the read went through the memo; the read did not.
    assert list(module._MEMO) == [(index, ((X, Interval(0, 7)),))]
    # Const(2.0, "int64") equals Const(2): neither answers for the other.
    for two in (2.0, 2):
        result = simplify_expr(minimum(X, Const(two)), {X: 8})
        assert isinstance(result, Binary) and type(result.b.value) is type(two)  # type: ignore[attr-defined]
    # 0.0 equals -0.0: float arithmetic is never answered from the memo.
    value = Var("v", "float32")
    for zero in (0.0, -0.0):
        result = simplify_expr(Binary(BinaryOp.MUL, value, Const(zero, "float32")))
        assert format_expr(result) == format_expr(value * Const(zero, "float32"))
