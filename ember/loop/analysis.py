"""Integer analysis of index expressions: constant bounds and linear (affine) forms.

`const_interval` bounds an int64 expression given the ranges of its variables (loop
variables range over [0, extent)); it is sound but not tight when a variable occurs more
than once. `LinearForm` writes an index expression as `sum(coefficient * atom) +
constant`, where an atom is anything that is not a sum, a negation or a product with a
constant (a variable, a floordiv, a Load...); the simplifier canonicalises sums through
it, and `linear_coefficients` uses it to find the stride of a loop variable in an index
(what vectorisation needs to emit a Ramp).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from ember.te.expr import INDEX_DTYPE, Binary, BinaryOp, Const, Expr, Select, Unary, UnaryOp, Var
from ember.te.visit import free_vars


@dataclass(frozen=True, slots=True)
class Interval:
    """The integers lo..hi (inclusive); None is an unbounded side."""

    lo: int | None = None
    hi: int | None = None

    @staticmethod
    def point(value: int) -> Interval:
        return Interval(value, value)

    @staticmethod
    def extent(extent: int) -> Interval:
        """The range of a loop variable: [0, extent)."""
        return Interval(0, extent - 1)

    @property
    def is_point(self) -> bool:
        return self.lo is not None and self.lo == self.hi

    def __add__(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else self.lo + other.lo
        hi = None if self.hi is None or other.hi is None else self.hi + other.hi
        return Interval(lo, hi)

    def scale(self, factor: int) -> Interval:
        lo = None if self.lo is None else self.lo * factor
        hi = None if self.hi is None else self.hi * factor
        return Interval(lo, hi) if factor >= 0 else Interval(hi, lo)

    def union(self, other: Interval) -> Interval:
        lo = None if self.lo is None or other.lo is None else min(self.lo, other.lo)
        hi = None if self.hi is None or other.hi is None else max(self.hi, other.hi)
        return Interval(lo, hi)

    def floordiv(self, divisor: int) -> Interval:
        """Bounds of `x // divisor` for a positive divisor (floor division is monotone)."""
        lo = None if self.lo is None else self.lo // divisor
        hi = None if self.hi is None else self.hi // divisor
        return Interval(lo, hi)

    def floormod(self, divisor: int) -> Interval:
        """Bounds of `x % divisor` for a positive divisor."""
        if self.lo is not None and self.hi is not None:
            quotient = self.lo // divisor
            if self.hi // divisor == quotient:  # no wrap-around inside the interval
                return Interval(self.lo - quotient * divisor, self.hi - quotient * divisor)
        return Interval(0, divisor - 1)


UNBOUNDED = Interval()

VarRanges = Mapping[Var, Interval]


def _product(a: Interval, b: Interval) -> Interval:
    if a.is_point:
        return b.scale(a.lo)  # type: ignore[arg-type]
    if b.is_point:
        return a.scale(b.lo)  # type: ignore[arg-type]
    if None in (a.lo, a.hi, b.lo, b.hi):
        return UNBOUNDED
    corners = [x * y for x in (a.lo, a.hi) for y in (b.lo, b.hi)]  # type: ignore[operator]
    return Interval(min(corners), max(corners))


def _extremum(op: BinaryOp, a: Interval, b: Interval) -> Interval:
    def pick(x: int | None, y: int | None, use_min: bool, none_wins: bool) -> int | None:
        if x is None or y is None:
            # min: an unbounded low side stays unbounded, an unbounded high side yields
            # to the other operand's bound (and symmetrically for max).
            return None if none_wins else (y if x is None else x)
        return min(x, y) if use_min else max(x, y)

    is_min = op is BinaryOp.MIN
    return Interval(pick(a.lo, b.lo, is_min, is_min), pick(a.hi, b.hi, is_min, not is_min))


def const_interval(expr: Expr, var_ranges: VarRanges) -> Interval:
    """Integer bounds of an int64 expression; UNBOUNDED where nothing is known."""
    if expr.dtype != INDEX_DTYPE:
        return UNBOUNDED
    match expr:
        case Const(value):
            return Interval.point(int(value))
        case Var():
            return var_ranges.get(expr, UNBOUNDED)
        case Unary(UnaryOp.NEG, a):
            return const_interval(a, var_ranges).scale(-1)
        case Select(_, true_value, false_value):
            return const_interval(true_value, var_ranges).union(
                const_interval(false_value, var_ranges)
            )
        case Binary(op, a, b):
            return _binary_interval(op, a, b, var_ranges)
    return UNBOUNDED


def _binary_interval(op: BinaryOp, a: Expr, b: Expr, var_ranges: VarRanges) -> Interval:
    left = const_interval(a, var_ranges)
    if op in (BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD):
        if not (isinstance(b, Const) and int(b.value) > 0):
            return UNBOUNDED
        divisor = int(b.value)
        return left.floordiv(divisor) if op is BinaryOp.FLOOR_DIV else left.floormod(divisor)
    right = const_interval(b, var_ranges)
    match op:
        case BinaryOp.ADD:
            return left + right
        case BinaryOp.SUB:
            return left + right.scale(-1)
        case BinaryOp.MUL:
            return _product(left, right)
        case BinaryOp.MIN | BinaryOp.MAX:
            return _extremum(op, left, right)
    return UNBOUNDED


# -- linear forms -----------------------------------------------------------------------


@dataclass(frozen=True, slots=True)
class LinearForm:
    """`sum(coefficient * atom for atom, coefficient in terms) + constant`; atoms are
    distinct and coefficients non-zero, in first-appearance order."""

    terms: tuple[tuple[Expr, int], ...] = ()
    constant: int = 0

    @staticmethod
    def of_constant(value: int) -> LinearForm:
        return LinearForm((), value)

    @staticmethod
    def of_atom(atom: Expr, coefficient: int = 1) -> LinearForm:
        return LinearForm(((atom, coefficient),) if coefficient else (), 0)

    @property
    def is_constant(self) -> bool:
        return not self.terms

    def coefficient(self, atom: Expr) -> int:
        return next((c for a, c in self.terms if a == atom), 0)

    def __add__(self, other: LinearForm) -> LinearForm:
        merged = dict(self.terms)
        for atom, coefficient in other.terms:
            merged[atom] = merged.get(atom, 0) + coefficient
        terms = tuple((a, c) for a, c in merged.items() if c != 0)
        return LinearForm(terms, self.constant + other.constant)

    def __sub__(self, other: LinearForm) -> LinearForm:
        return self + other.scale(-1)

    def scale(self, factor: int) -> LinearForm:
        if factor == 0:
            return LinearForm()
        return LinearForm(tuple((a, c * factor) for a, c in self.terms), self.constant * factor)

    def without(self, atom: Expr) -> LinearForm:
        return LinearForm(tuple((a, c) for a, c in self.terms if a != atom), self.constant)

    def interval(self, var_ranges: VarRanges) -> Interval:
        total = Interval.point(self.constant)
        for atom, coefficient in self.terms:
            total = total + const_interval(atom, var_ranges).scale(coefficient)
        return total


def to_linear(expr: Expr) -> LinearForm:
    """The linear form of an int64 expression (anything else is one atom)."""
    if expr.dtype != INDEX_DTYPE:
        return LinearForm.of_atom(expr)
    match expr:
        case Const(value):
            return LinearForm.of_constant(int(value))
        case Unary(UnaryOp.NEG, a):
            return to_linear(a).scale(-1)
        case Binary(BinaryOp.ADD, a, b):
            return to_linear(a) + to_linear(b)
        case Binary(BinaryOp.SUB, a, b):
            return to_linear(a) - to_linear(b)
        case Binary(BinaryOp.MUL, a, b):
            left, right = to_linear(a), to_linear(b)
            if right.is_constant:
                return left.scale(right.constant)
            if left.is_constant:
                return right.scale(left.constant)
    return LinearForm.of_atom(expr)


def _term(atom: Expr, coefficient: int) -> Expr:
    return atom if coefficient == 1 else Binary(BinaryOp.MUL, atom, Const(coefficient))


def from_linear(form: LinearForm) -> Expr:
    """The canonical expression of a linear form: positive terms first, by decreasing
    coefficient (row-major strides read outer to inner), then negative terms, then the
    constant; with no positive term a positive constant leads (`c - x*k`)."""
    positive = sorted((t for t in form.terms if t[1] > 0), key=lambda t: -t[1])
    negative = sorted((t for t in form.terms if t[1] < 0), key=lambda t: t[1])
    constant = form.constant
    if positive:
        result = _term(*positive[0])
        for atom, coefficient in positive[1:]:
            result = Binary(BinaryOp.ADD, result, _term(atom, coefficient))
    elif constant > 0 or not negative:
        result, constant = Const(constant), 0
    else:
        atom, coefficient = negative.pop(0)
        result = Unary(UnaryOp.NEG, _term(atom, -coefficient))
    for atom, coefficient in negative:
        result = Binary(BinaryOp.SUB, result, _term(atom, -coefficient))
    if constant > 0:
        return Binary(BinaryOp.ADD, result, Const(constant))
    if constant < 0:
        return Binary(BinaryOp.SUB, result, Const(-constant))
    return result


def linear_coefficients(expr: Expr, var: Var) -> tuple[int, Expr] | None:
    """`(stride, offset)` with `expr == stride * var + offset` and `offset` free of
    `var`, or None when `expr` is not affine in `var` (e.g. `var // 4`)."""
    form = to_linear(expr)
    stride = form.coefficient(var)
    rest = form.without(var)
    if any(var in free_vars(atom) for atom, _ in rest.terms):
        return None
    return stride, from_linear(rest)
