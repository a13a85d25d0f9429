"""The loop-IR simplifier: cleans the index arithmetic that splitting and fusing loops
produce, and removes loops and guards that do nothing.

`simplify_expr(expr, ranges)` rewrites bottom up. Each node, its children simplified:
1. constants fold (computed with the interpreter's semantics, so float32 stays float32);
2. int64 sums, products and floordiv/floormod by a positive constant are rebuilt from
   their linear form (`ember.loop.analysis.LinearForm`): like terms collect
   (`x*4 + x*2 -> x*6`), strides read outer to inner (`i.0*64 + i.1*16 + i.2`), and the
   div/mod tables below apply;
3. anything else goes through the rule tables of `simplify_rules.py`.
A rewrite's result is simplified again. Every rewrite is exact for all values of the
variables within `ranges` (loop variables range over [0, extent)); float expressions get
only rewrites that are exact in floating point (no reassociation).

`simplify(stmt_or_func)` simplifies every expression with the ranges of the enclosing
loops, drops loops of extent 1 (their variable becomes 0) and of extent 0, drops
IfThenElse whose condition is decided, inlines int64 lets of a constant and flattens Seq.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from math import gcd
from typing import overload

import numpy as np

from ember.errors import LoopIRError
from ember.loop.analysis import (
    UNBOUNDED,
    Interval,
    LinearForm,
    VarRanges,
    const_interval,
    from_linear,
    to_linear,
)
from ember.loop.interpret import evaluate_expr
from ember.loop.ir import (
    Allocate,
    Broadcast,
    For,
    IfThenElse,
    LetStmt,
    PrimFunc,
    Ramp,
    Seq,
    Stmt,
    Store,
)
from ember.loop.simplify_rules import apply_rules
from ember.te.expr import (
    INDEX_DTYPE,
    Binary,
    BinaryOp,
    Cast,
    Const,
    Expr,
    Select,
    Unary,
    UnaryOp,
    Var,
)
from ember.te.visit import children, rebuild, walk

EMPTY = Seq(())  # what a statement that does nothing simplifies to

_LINEAR_OPS = (BinaryOp.ADD, BinaryOp.SUB, BinaryOp.MUL)


# -- div / mod and sum rules on linear forms --------------------------------------------
#
# Each rule takes the linear form of the dividend (or of the whole sum) and returns the
# rewritten expression, or None; results are simplified again.

DivModRule = Callable[["_Simplifier", LinearForm, int], Expr | None]


def _common_divisor(form: LinearForm, divisor: int) -> int:
    return gcd(divisor, form.constant, *(c for _, c in form.terms))


def _split_multiples(form: LinearForm, divisor: int) -> tuple[LinearForm, LinearForm]:
    """`form == divisor * quotient + rest`, rest without multiples of `divisor` and its
    constant in [0, divisor)."""
    quotient_constant, rest_constant = divmod(form.constant, divisor)
    multiples = tuple((a, c // divisor) for a, c in form.terms if c % divisor == 0)
    rest = tuple((a, c) for a, c in form.terms if c % divisor != 0)
    return LinearForm(multiples, quotient_constant), LinearForm(rest, rest_constant)


def _floordiv(a: Expr, divisor: int) -> Expr:
    return Binary(BinaryOp.FLOOR_DIV, a, Const(divisor))


def _floormod(a: Expr, divisor: int) -> Expr:
    return Binary(BinaryOp.FLOOR_MOD, a, Const(divisor))


def _div_common_divisor(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # (x*(g*a) + g*b) // (g*c) -> (x*a + b) // c
    g = _common_divisor(form, c)
    if g == 1:
        return None
    return _floordiv(from_linear(_scaled_down(form, g)), c // g)


def _div_multiples(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # (x*(c*k) + y) // c -> x*k + y // c
    quotient, rest = _split_multiples(form, c)
    if quotient == LinearForm():
        return None
    return Binary(BinaryOp.ADD, from_linear(quotient), _floordiv(from_linear(rest), c))


def _div_in_range(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # y // c -> k when k*c <= y < (k+1)*c
    bounds = form.interval(s.ranges)
    if bounds.lo is None or bounds.hi is None or bounds.lo // c != bounds.hi // c:
        return None
    return Const(bounds.lo // c)


def _div_nested(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # (x // c1 + k) // c -> (x + k*c1) // (c1*c)
    if len(form.terms) != 1:
        return None
    (inner, coefficient), k = form.terms[0], form.constant
    match inner:
        case Binary(BinaryOp.FLOOR_DIV, x, Const(c1)) if coefficient == 1 and int(c1) > 0:
            shifted = Binary(BinaryOp.ADD, x, Const(k * int(c1)))
            return _floordiv(shifted, int(c1) * c)
    return None


def _mod_common_divisor(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # (x*(g*a) + g*b) % (g*c) -> ((x*a + b) % c) * g
    g = _common_divisor(form, c)
    if g == 1:
        return None
    reduced = _floormod(from_linear(_scaled_down(form, g)), c // g)
    return Binary(BinaryOp.MUL, reduced, Const(g))


def _mod_multiples(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # (x*(c*k) + y) % c -> y % c   (with y's constant reduced into [0, c))
    quotient, rest = _split_multiples(form, c)
    if quotient == LinearForm():
        return None
    return _floormod(from_linear(rest), c)


def _mod_of_mod(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # ((x % c1)*k + y) % c -> (x*k + y) % c when c divides c1*k
    for atom, k in form.terms:
        match atom:
            case Binary(BinaryOp.FLOOR_MOD, x, Const(c1)) if int(c1) > 0 and int(c1) * k % c == 0:
                unwrapped = form.without(atom) + to_linear(x).scale(k)
                return _floormod(from_linear(unwrapped), c)
    return None


def _mod_in_range(s: _Simplifier, form: LinearForm, c: int) -> Expr | None:
    # y % c -> y - k*c when k*c <= y < (k+1)*c
    bounds = form.interval(s.ranges)
    if bounds.lo is None or bounds.hi is None or bounds.lo // c != bounds.hi // c:
        return None
    return from_linear(form - LinearForm.of_constant(bounds.lo // c * c))


FLOOR_DIV_RULES: tuple[DivModRule, ...] = (
    _div_common_divisor,  # (x*(g*a) + g*b) // (g*c) -> (x*a + b) // c
    _div_multiples,  # (x*(c*k) + y) // c -> x*k + y // c
    _div_in_range,  # y // c -> k when k*c <= y < (k+1)*c
    _div_nested,  # (x // c1 + k) // c -> (x + k*c1) // (c1*c)
)
FLOOR_MOD_RULES: tuple[DivModRule, ...] = (
    _mod_common_divisor,  # (x*(g*a) + g*b) % (g*c) -> ((x*a + b) % c) * g
    _mod_multiples,  # (x*(c*k) + y) % c -> y % c
    _mod_of_mod,  # ((x % c1)*k + y) % c -> (x*k + y) % c when c divides c1*k
    _mod_in_range,  # y % c -> y - k*c when k*c <= y < (k+1)*c
)


def _scaled_down(form: LinearForm, g: int) -> LinearForm:
    return LinearForm(tuple((a, c // g) for a, c in form.terms), form.constant // g)


SumRule = Callable[["_Simplifier", LinearForm], LinearForm | None]


def _fuse_div_mod(s: _Simplifier, form: LinearForm) -> LinearForm | None:
    # (x // c)*(c*k) + (x % c)*k -> x*k
    for atom, k in form.terms:
        match atom:
            case Binary(BinaryOp.FLOOR_MOD, x, Const(c)) if int(c) > 0:
                quotient = to_linear(s.expr(_floordiv(x, int(c)))).scale(int(c) * k)
                if _contains(form, quotient):
                    return form.without(atom) - quotient + to_linear(x).scale(k)
    return None


def _fuse_mod_mod(s: _Simplifier, form: LinearForm) -> LinearForm | None:
    # ((x // c1) % c2)*(c1*k) + (x % c1)*k -> (x % (c1*c2))*k
    for atom, k in form.terms:
        match atom:
            case Binary(BinaryOp.FLOOR_MOD, Binary(BinaryOp.FLOOR_DIV, x, Const(c1)), Const(c2)):
                low = s.expr(_floormod(x, int(c1)))
                if int(c1) > 0 and int(c2) > 0 and k % int(c1) == 0:
                    low_coefficient = k // int(c1)
                    if form.coefficient(low) == low_coefficient:
                        whole = s.expr(_floormod(x, int(c1) * int(c2)))
                        rest = form.without(atom).without(low)
                        return rest + to_linear(whole).scale(low_coefficient)
    return None


def _contains(form: LinearForm, part: LinearForm) -> bool:
    """Every term of `part` occurs in `form` with the same sign and at least its size,
    so replacing `part` never adds a term."""
    if part.is_constant:
        return False
    for atom, coefficient in part.terms:
        present = form.coefficient(atom)
        if present * coefficient <= 0 or abs(present) < abs(coefficient):
            return False
    return True


SUM_RULES: tuple[SumRule, ...] = (
    _fuse_div_mod,  # (x // c)*(c*k) + (x % c)*k -> x*k
    _fuse_mod_mod,  # ((x // c1) % c2)*(c1*k) + (x % c1)*k -> (x % (c1*c2))*k
)


# -- the expression simplifier ----------------------------------------------------------


def _fold_constant(expr: Expr) -> Expr | None:
    """The constant an operator on constants evaluates to, in the interpreter's
    semantics; None where folding would hide an error or a non-finite value."""
    if not isinstance(expr, Binary | Unary | Cast | Select):
        return None
    if not all(isinstance(child, Const) for child in children(expr)):
        return None
    if "x" in expr.dtype:  # vector dtype: folding lanes is codegen's business
        return None
    try:
        value = evaluate_expr(expr)
    except (LoopIRError, ValueError, OverflowError):
        return None
    if expr.dtype == "bool":
        return Const(bool(value), "bool")
    if isinstance(value, float | np.floating):
        return Const(float(value), expr.dtype) if np.isfinite(value) else None
    return Const(int(value), expr.dtype)


class _Simplifier:
    """One simplification: the variable ranges in force and a memo of results."""

    def __init__(self, ranges: VarRanges) -> None:
        self.ranges = ranges
        self.memo: dict[Expr, Expr] = {}

    def expr(self, expr: Expr) -> Expr:
        key = _memo_key(expr, self.ranges)
        if key is None:  # not integer arithmetic: its parts that are go through the memo
            return self._expr(expr, shared=True)
        known = _MEMO.get(key)
        if known is None:
            known = self._expr(expr, shared=False)
            if len(_MEMO) >= _MEMO_SIZE:
                _MEMO.clear()
            _MEMO[key] = known
        return known

    def _expr(self, expr: Expr, shared: bool) -> Expr:
        """`expr` simplified bottom up; children through the shared memo if `shared`
        (whose keys are worth computing only above integer arithmetic)."""
        # Float nodes are not memoised: structural equality treats 0.0 and -0.0 alike.
        memoise = not expr.dtype.startswith("float")
        if memoise and (known := self.memo.get(expr)) is not None:
            return known
        old = children(expr)
        # A loop, not a generator expression: a generator's frame per level would
        # halve the depth of float expressions Python's recursion limit allows.
        simplified: list[Expr] = []
        for child in old:
            simplified.append(self.expr(child) if shared else self._expr(child, shared=False))
        new = tuple(simplified)
        changed = any(a is not b for a, b in zip(old, new, strict=True))
        result = self._node(rebuild(expr, new) if changed else expr)
        if memoise:
            self.memo[expr] = result
        return result

    def _node(self, expr: Expr) -> Expr:
        match expr:
            case Var() if expr.dtype == INDEX_DTYPE:
                bounds = self.ranges.get(expr, UNBOUNDED)
                return Const(bounds.lo) if bounds.is_point else expr  # type: ignore[arg-type]
            case Cast(dtype, value) if value.dtype == dtype:
                return value
            case Ramp(base, _, 1) | Broadcast(base, 1):
                return base
        folded = _fold_constant(expr)
        if folded is not None:
            return folded
        if expr.dtype == INDEX_DTYPE and isinstance(expr, Binary | Unary):
            canonical = self._canonical(expr)
            if canonical is not None:
                return canonical
        rewritten = apply_rules(expr, self.ranges)
        return expr if rewritten is None else self.expr(rewritten)

    def _canonical(self, expr: Binary | Unary) -> Expr | None:
        """Index arithmetic rebuilt from its linear form; None for other operators."""
        if isinstance(expr, Unary):
            return self._sum(to_linear(expr)) if expr.op is UnaryOp.NEG else None
        if expr.op in _LINEAR_OPS:
            return self._sum(to_linear(expr))
        if expr.op in (BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD):
            return self._div_mod(expr)
        return None

    def _sum(self, form: LinearForm) -> Expr:
        changed = True
        while changed:
            changed = False
            for rule in SUM_RULES:
                rewritten = rule(self, form)
                if rewritten is not None:
                    form, changed = rewritten, True
        return from_linear(form)

    def _div_mod(self, expr: Binary) -> Expr:
        if not isinstance(expr.b, Const) or int(expr.b.value) <= 0:
            return expr
        divisor = int(expr.b.value)
        if divisor == 1:  # x // 1 -> x, x % 1 -> 0
            return expr.a if expr.op is BinaryOp.FLOOR_DIV else Const(0)
        form = to_linear(expr.a)
        rules = FLOOR_DIV_RULES if expr.op is BinaryOp.FLOOR_DIV else FLOOR_MOD_RULES
        for rule in rules:
            rewritten = rule(self, form, divisor)
            if rewritten is not None:
                return self.expr(rewritten)
        return expr


def _as_ranges(ranges: Mapping[Var, int | Interval] | None) -> dict[Var, Interval]:
    return {
        var: bounds if isinstance(bounds, Interval) else Interval.extent(bounds)
        for var, bounds in (ranges or {}).items()
    }


def simplify_expr(expr: Expr, ranges: Mapping[Var, int | Interval] | None = None) -> Expr:
    """`expr` simplified, exact for every value of its variables within `ranges` (an
    int is a loop extent: the variable ranges over [0, extent))."""
    return _Simplifier(_as_ranges(ranges)).expr(expr)


# Simplified integer arithmetic in this process, by expression and the ranges of its
# variables (`_memo_key`), for every simplification. Lowering and the backend's passes
# simplify the same index expressions over and over: the states a search round lowers
# share their DAG, and a kernel's loops repeat their neighbours' indices (240 random
# ResNet-18 states: 10,207 `simplify_expr` calls in lowering, 1,957 distinct; the
# simplifier was two thirds of lowering). Cleared when full, to bound the memory; a
# change to the rule tables at run time must clear it too.
_MEMO: dict[tuple[Expr, tuple[tuple[Var, Interval], ...]], Expr] = {}
_MEMO_SIZE = 20_000


def _memo_key(
    expr: Expr, ranges: Mapping[Var, Interval]
) -> tuple[Expr, tuple[tuple[Var, Interval], ...]] | None:
    """`expr` and the ranges of its variables (all its result depends on); None unless
    it is integer arithmetic on variables and constants. Structural equality is not
    sameness for floats (0.0 equals -0.0) nor for reads (a memoised result would
    hold another read's buffer object)."""
    if isinstance(expr, Var | Const):
        return None  # nothing to save
    variables: dict[Var, Interval] = {}
    for node in walk(expr):  # stops at the first node that is not integer arithmetic
        if isinstance(node, Var):
            variables[node] = ranges.get(node, UNBOUNDED)
        elif isinstance(node, Binary | Unary | Select | Cast):
            if node.dtype.startswith("float"):
                return None
        elif (
            not isinstance(node, Const)
            or node.dtype.startswith("float")
            or isinstance(node.value, float)  # Const(2.0, "int64") equals Const(2)
        ):
            return None
    # Equal expressions are walked alike, so their variables come in the same order.
    return expr, tuple(variables.items())


# -- statements -------------------------------------------------------------------------


@overload
def simplify(node: PrimFunc, ranges: Mapping[Var, int | Interval] | None = None) -> PrimFunc: ...
@overload
def simplify(node: Stmt, ranges: Mapping[Var, int | Interval] | None = None) -> Stmt: ...
def simplify(
    node: Stmt | PrimFunc, ranges: Mapping[Var, int | Interval] | None = None
) -> Stmt | PrimFunc:
    """Simplify every expression with the ranges of the enclosing loops and remove what
    does nothing (see the module docstring). Does nothing is `Seq(())`."""
    if isinstance(node, PrimFunc):
        return replace(node, body=_stmt(node.body, _as_ranges(ranges)))
    return _stmt(node, _as_ranges(ranges))


def _stmt(stmt: Stmt, ranges: dict[Var, Interval]) -> Stmt:
    simplifier = _Simplifier(ranges)
    match stmt:
        case For(var, extent):
            return _for(var, simplifier.expr(extent), stmt, ranges)
        case Store(buffer, indices, value, predicate):
            new_indices = tuple(simplifier.expr(i) for i in indices)
            mask = None if predicate is None else simplifier.expr(predicate)
            return Store(buffer, new_indices, simplifier.expr(value), mask)
        case Seq(stmts):
            return _seq(tuple(_stmt(s, ranges) for s in stmts))
        case IfThenElse(condition, then_body, else_body):
            return _if(simplifier.expr(condition), then_body, else_body, ranges)
        case Allocate(buffer, body):
            new_body = _stmt(body, ranges)
            return EMPTY if new_body == EMPTY else Allocate(buffer, new_body)
        case LetStmt(var, value, body):
            return _let(var, simplifier.expr(value), body, ranges)
    raise TypeError(f"cannot simplify statement {type(stmt).__name__}")


def _for(var: Var, extent: Expr, loop: For, ranges: dict[Var, Interval]) -> Stmt:
    hi = const_interval(extent, ranges).hi
    if hi is not None and hi <= 0:
        return EMPTY  # the loop never runs
    if isinstance(extent, Const) and int(extent.value) == 1:
        return _stmt(loop.body, {**ranges, var: Interval.point(0)})
    body = _stmt(loop.body, {**ranges, var: Interval(0, None if hi is None else hi - 1)})
    return EMPTY if body == EMPTY else replace(loop, extent=extent, body=body)


def _if(
    condition: Expr, then_body: Stmt, else_body: Stmt | None, ranges: dict[Var, Interval]
) -> Stmt:
    if isinstance(condition, Const):
        taken = then_body if condition.value else else_body
        return EMPTY if taken is None else _stmt(taken, ranges)
    new_then = _stmt(then_body, _refine(ranges, condition))
    new_else = None if else_body is None else _stmt(else_body, ranges)
    if new_else == EMPTY:
        new_else = None
    if new_then == EMPTY and new_else is None:
        return EMPTY
    return IfThenElse(condition, new_then, new_else)


def _refine(ranges: dict[Var, Interval], condition: Expr) -> dict[Var, Interval]:
    """The ranges inside `if condition:` for guards of the form `var < c` (and <=, >,
    >=, and conjunctions of them)."""
    match condition:
        case Binary(BinaryOp.AND, a, b):
            return _refine(_refine(ranges, a), b)
        case Binary(op, Var() as var, Const(value)) if var.dtype == INDEX_DTYPE:
            bound = int(value)
            current = ranges.get(var, UNBOUNDED)
            lo, hi = current.lo, current.hi
            if op is BinaryOp.LT:
                hi = bound - 1 if hi is None else min(hi, bound - 1)
            elif op is BinaryOp.LE:
                hi = bound if hi is None else min(hi, bound)
            elif op is BinaryOp.GT:
                lo = bound + 1 if lo is None else max(lo, bound + 1)
            elif op is BinaryOp.GE:
                lo = bound if lo is None else max(lo, bound)
            if lo is not None and hi is not None and lo > hi:
                return ranges  # a contradiction: the branch never runs, leave it alone
            return {**ranges, var: Interval(lo, hi)}
    return ranges


def _let(var: Var, value: Expr, body: Stmt, ranges: dict[Var, Interval]) -> Stmt:
    if var.dtype == INDEX_DTYPE and isinstance(value, Const):
        return _stmt(body, {**ranges, var: Interval.point(int(value.value))})
    bounds = const_interval(value, ranges) if var.dtype == INDEX_DTYPE else UNBOUNDED
    new_body = _stmt(body, {**ranges, var: bounds})
    return EMPTY if new_body == EMPTY else LetStmt(var, value, new_body)


def _seq(stmts: tuple[Stmt, ...]) -> Stmt:
    flat: list[Stmt] = []
    for stmt in stmts:
        flat.extend(stmt.stmts if isinstance(stmt, Seq) else (stmt,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
