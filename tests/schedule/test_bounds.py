"""Bound inference: symbolic interval arithmetic on index expressions, and regions.

Unit cases pin the forms lowering relies on; a property test checks every interval
against brute-force evaluation over all values of the ranging variables.
"""

from __future__ import annotations

import itertools

from hypothesis import given, settings
from hypothesis import strategies as st

from ember.loop.analysis import LinearForm, from_linear
from ember.loop.interpret import evaluate_expr
from ember.schedule.bounds import Region, SymbolicInterval, bound, infer_region
from ember.te.expr import INDEX_DTYPE, Const, Expr, Var, maximum, minimum, select

x0, x1, y, r, f = (Var(n, INDEX_DTYPE) for n in ("x0", "x1", "y", "r", "f"))


def c(value: int) -> Const:
    return Const(value, INDEX_DTYPE)


def affine(constant: int = 0, **terms: int) -> LinearForm:
    return LinearForm(tuple((Var(n, INDEX_DTYPE), k) for n, k in terms.items()), constant)


def test_bound_of_a_split_index_with_the_outer_part_fixed() -> None:
    # xx = xx.0 * 4 + xx.1, window rx: xx.0 fixed, xx.1 in 0..3, rx in 0..2
    interval = bound(x0 * c(4) + x1 + r, {x1: 4, r: 3})
    assert interval == SymbolicInterval(affine(0, x0=4), affine(5, x0=4))


def test_bound_of_fixed_non_affine_parts_is_the_part_itself() -> None:
    interval = bound(f % c(8) + y, {y: 3})
    assert interval == SymbolicInterval(
        LinearForm(((f % c(8), 1),), 0), LinearForm(((f % c(8), 1),), 2)
    )


def test_bound_of_division_and_modulo() -> None:
    assert bound(f // c(6), {f: 24}) == SymbolicInterval.constant(0, 3)
    assert bound(f % c(6), {f: 24}) == SymbolicInterval.constant(0, 5)
    assert bound(f % c(8), {f: 4}) == SymbolicInterval.constant(0, 3)
    # A symbolic part divisible by the divisor passes through exactly.
    assert bound((x0 * c(8) + y) // c(4), {y: 8}) == SymbolicInterval(
        affine(0, x0=2), affine(1, x0=2)
    )
    assert bound((x0 * c(8) + y) % c(4), {y: 3}) == SymbolicInterval.constant(0, 2)
    # Otherwise division is unknown and modulo is anything below the divisor.
    assert bound((x0 + y) // c(4), {y: 8}) is None
    assert bound((x0 + y) % c(4), {y: 8}) == SymbolicInterval.constant(0, 3)


def test_bound_of_products_min_max_and_select() -> None:
    assert bound((y - c(2)) * (r - c(1)), {y: 4, r: 3}) == SymbolicInterval.constant(-2, 2)
    assert bound(minimum(y, c(2)), {y: 5}) == SymbolicInterval.constant(0, 2)
    assert bound(maximum(y + x0, y + x0 + c(1)), {y: 5}) == SymbolicInterval(
        affine(0, x0=1), affine(5, x0=1)
    )
    assert bound(select(y < c(2), y, c(9)), {y: 5}) == SymbolicInterval.constant(0, 9)
    assert bound(x0 * y, {y: 4}) is None


def test_region_of_a_conv_window_under_a_row_loop() -> None:
    # pad[n, yy + ry, xx + rx, rc] with yy fixed and xx, ry, rx, rc ranging
    n = Var("n", INDEX_DTYPE)
    reads = [(n, y + r, x1 + x0, f)]
    region = infer_region(reads, (1, 9, 9, 4), {r: 3, x1: 7, x0: 3, f: 4})
    assert region.extents == (1, 3, 9, 4)
    # n is the whole (size 1) dimension, so the region starts at 0 there.
    assert region.starts[:2] == (LinearForm(), affine(0, y=1))
    assert region.covers_dim(0, 1) and region.covers_dim(2, 9) and region.covers_dim(3, 4)
    assert not region.covers_dim(1, 9)


def test_region_unites_reads_and_falls_back_to_whole_dimensions() -> None:
    reads = [(x0 * c(2) + y,), (x0 * c(2) + y + c(1),)]
    assert infer_region(reads, (20,), {y: 2}) == Region((affine(0, x0=2),), (3,))
    # Different atoms, an unknown bound, or a region no smaller than the tensor.
    assert infer_region([(x0,), (x1,)], (20,), {}) == Region.whole((20,))
    assert infer_region([((x0 + y) // c(3),)], (20,), {y: 4}) == Region.whole((20,))
    assert infer_region([(y,)], (4,), {y: 6}) == Region.whole((4,))
    assert infer_region([], (5, 6), {}) == Region.whole((5, 6))


# -- property: intervals hold every value ---------------------------------------------

RANGING = {y: 3, r: 4}


def index_exprs() -> st.SearchStrategy[Expr]:
    leaves = st.sampled_from([y, r, x0, c(0), c(1), c(3), c(-2)])

    def extend(children: st.SearchStrategy[Expr]) -> st.SearchStrategy[Expr]:
        small = st.integers(1, 5).map(c)
        return st.one_of(
            st.tuples(children, children).map(lambda p: p[0] + p[1]),
            st.tuples(children, children).map(lambda p: p[0] - p[1]),
            st.tuples(children, children).map(lambda p: p[0] * p[1]),
            st.tuples(children, small).map(lambda p: p[0] // p[1]),
            st.tuples(children, small).map(lambda p: p[0] % p[1]),
            st.tuples(children, children).map(lambda p: minimum(p[0], p[1])),
            st.tuples(children, children).map(lambda p: maximum(p[0], p[1])),
        )

    return st.recursive(leaves, extend, max_leaves=6)


@settings(max_examples=300, deadline=None)
@given(index_exprs(), st.integers(-3, 3))
def test_interval_holds_every_value(expr: Expr, fixed: int) -> None:
    interval = bound(expr, RANGING)
    if interval is None:
        return
    env_fixed = {x0: fixed}
    lo = _value(interval.lo, env_fixed)
    hi = _value(interval.hi, env_fixed)
    for values in itertools.product(*(range(e) for e in RANGING.values())):
        env = {**env_fixed, **dict(zip(RANGING, values, strict=True))}
        assert lo <= evaluate_expr(expr, env) <= hi, (str(expr), env, lo, hi)


def _value(form: LinearForm, env: dict[Var, int]) -> int:
    return int(evaluate_expr(from_linear(form), env))
