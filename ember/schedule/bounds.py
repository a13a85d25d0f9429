"""Bound inference: which part of a tensor the loops under an attach point read.

compute_at computes a producer inside one of its consumer's loops, for just the
elements that the consumer's iterations under that loop read. Those iterations are
described by two kinds of loop variables: *fixed* ones (the loops at and outside the
attach point, plus every enclosing loop), which are symbols here, and *ranging* ones
(the loops inside), which run over `0 .. extent - 1`.

Index expressions are put in affine form over *atoms*: a fixed variable, or a whole
sub-expression that uses only fixed variables (`fused // 8`). Interval arithmetic on that
form gives each read index a lower and an upper bound; when both bounds have the same
atoms, the region has a constant extent (a buffer size) and a start that is an
affine expression of the fixed variables. Anything else falls back to the whole
dimension, which is always correct.

Affine forms are `ember.loop.analysis.LinearForm`; lowering takes constant bounds and
index folding from the loop simplifier (`const_interval`, `simplify_expr`).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

from ember.loop.analysis import LinearForm, to_linear
from ember.te.expr import INDEX_DTYPE, Binary, BinaryOp, Cast, Expr, Select, Unary, UnaryOp, Var
from ember.te.visit import free_vars


def same_atoms(a: LinearForm, b: LinearForm) -> bool:
    """Whether two forms differ by a constant only."""
    return dict(a.terms) == dict(b.terms)


@dataclass(frozen=True, slots=True)
class SymbolicInterval:
    """`lo <= value <= hi`, both ends affine in the fixed variables."""

    lo: LinearForm
    hi: LinearForm

    @staticmethod
    def point(value: LinearForm) -> SymbolicInterval:
        return SymbolicInterval(value, value)

    @staticmethod
    def constant(lo: int, hi: int) -> SymbolicInterval:
        return SymbolicInterval(LinearForm.of_constant(lo), LinearForm.of_constant(hi))

    @property
    def is_constant(self) -> bool:
        return self.lo.is_constant and self.hi.is_constant


def bound(expr: Expr, ranging: Mapping[Var, int]) -> SymbolicInterval | None:
    """Bounds of `expr` while each variable in `ranging` runs over `0 .. extent - 1`
    (every other variable is fixed); None when no rule applies."""
    if not any(var in ranging for var in free_vars(expr)):
        return SymbolicInterval.point(to_linear(expr))
    match expr:
        case Var():
            return SymbolicInterval.constant(0, ranging[expr] - 1)
        case Binary(op, a, b):
            return _bound_binary(op, a, b, ranging)
        case Unary(UnaryOp.NEG, a):
            inner = bound(a, ranging)
            return (
                None if inner is None else SymbolicInterval(inner.hi.scale(-1), inner.lo.scale(-1))
            )
        case Cast(dtype, value) if dtype == INDEX_DTYPE:
            return bound(value, ranging)
        case Select(_, true_value, false_value):
            return _union(bound(true_value, ranging), bound(false_value, ranging))
    return None


def _bound_binary(
    op: BinaryOp, a: Expr, b: Expr, ranging: Mapping[Var, int]
) -> SymbolicInterval | None:
    left, right = bound(a, ranging), bound(b, ranging)
    if left is None or right is None:
        return None
    match op:
        case BinaryOp.ADD:
            return SymbolicInterval(left.lo + right.lo, left.hi + right.hi)
        case BinaryOp.SUB:
            return SymbolicInterval(left.lo - right.hi, left.hi - right.lo)
        case BinaryOp.MUL:
            return _bound_product(left, right)
        case BinaryOp.FLOOR_DIV | BinaryOp.FLOOR_MOD if (
            right.is_constant and right.lo.constant == right.hi.constant > 0
        ):
            return _bound_division(op, left, right.lo.constant)
        case BinaryOp.MIN | BinaryOp.MAX if left.is_constant and right.is_constant:
            pick = min if op is BinaryOp.MIN else max
            return SymbolicInterval.constant(
                pick(left.lo.constant, right.lo.constant), pick(left.hi.constant, right.hi.constant)
            )
        case BinaryOp.MIN | BinaryOp.MAX:
            # Either operand's bounds, when they agree on atoms: a safe over-estimate.
            return _union(left, right)
    return None


def _bound_product(left: SymbolicInterval, right: SymbolicInterval) -> SymbolicInterval | None:
    if right.is_constant and right.lo.constant == right.hi.constant:
        factor = right.lo.constant
    elif left.is_constant and left.lo.constant == left.hi.constant:
        left, right, factor = right, left, left.lo.constant
    elif left.is_constant and right.is_constant:
        # Non-affine: the extremes of a product of intervals are products of ends.
        products = [
            x * y
            for x in (left.lo.constant, left.hi.constant)
            for y in (right.lo.constant, right.hi.constant)
        ]
        return SymbolicInterval.constant(min(products), max(products))
    else:
        return None
    lo, hi = left.lo.scale(factor), left.hi.scale(factor)
    return SymbolicInterval(lo, hi) if factor >= 0 else SymbolicInterval(hi, lo)


def _bound_division(op: BinaryOp, value: SymbolicInterval, divisor: int) -> SymbolicInterval | None:
    # With every coefficient a multiple of the divisor, `(S + x) // d == S / d + x // d`
    # and `(S + x) % d == x % d`, so the symbolic part passes through exactly.
    divisible = all(c % divisor == 0 for _, c in value.lo.terms + value.hi.terms)
    if not divisible or not same_atoms(value.lo, value.hi):
        return SymbolicInterval.constant(0, divisor - 1) if op is BinaryOp.FLOOR_MOD else None
    symbolic = LinearForm(tuple((a, c // divisor) for a, c in value.lo.terms), 0)
    lo, hi = value.lo.constant, value.hi.constant
    if op is BinaryOp.FLOOR_DIV:
        return SymbolicInterval(
            symbolic + LinearForm.of_constant(lo // divisor),
            symbolic + LinearForm.of_constant(hi // divisor),
        )
    if lo // divisor == hi // divisor:
        return SymbolicInterval.constant(lo % divisor, hi % divisor)
    return SymbolicInterval.constant(0, divisor - 1)


def _union(a: SymbolicInterval | None, b: SymbolicInterval | None) -> SymbolicInterval | None:
    """The smallest interval holding both, when their ends have the same atoms."""
    if a is None or b is None:
        return None
    if not (same_atoms(a.lo, b.lo) and same_atoms(a.hi, b.hi)):
        return None
    lo = a.lo if a.lo.constant <= b.lo.constant else b.lo
    hi = a.hi if a.hi.constant >= b.hi.constant else b.hi
    return SymbolicInterval(lo, hi)


@dataclass(frozen=True, slots=True)
class Region:
    """The part of a tensor a stage computes: per dimension, the start (affine in the
    fixed loop variables) and the constant extent."""

    starts: tuple[LinearForm, ...]
    extents: tuple[int, ...]

    @staticmethod
    def whole(shape: Sequence[int]) -> Region:
        return Region(tuple(LinearForm() for _ in shape), tuple(shape))

    def covers_dim(self, dim: int, size: int) -> bool:
        """Whether dimension `dim` is the whole `0 .. size - 1`."""
        start = self.starts[dim]
        return start.is_constant and start.constant == 0 and self.extents[dim] == size


def infer_region(
    reads: Sequence[Sequence[Expr]], shape: Sequence[int], ranging: Mapping[Var, int]
) -> Region:
    """The region of a tensor of `shape` that reads at `reads` (index tuples) touch while
    the `ranging` variables run over their extents; whole dimensions where unknown or
    where the region would be no smaller than the dimension."""
    starts, extents = [], []
    for dim, size in enumerate(shape):
        interval: SymbolicInterval | None = None
        for index in reads:
            found = bound(index[dim], ranging)
            interval = found if interval is None else _union(interval, found)
            if interval is None:
                break
        extent = 0
        if interval is not None and same_atoms(interval.lo, interval.hi):
            extent = interval.hi.constant - interval.lo.constant + 1
        if interval is None or not 0 < extent < size:
            starts.append(LinearForm())
            extents.append(size)
        else:
            starts.append(interval.lo)
            extents.append(extent)
    return Region(tuple(starts), tuple(extents))
