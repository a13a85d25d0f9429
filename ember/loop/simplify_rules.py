"""Rewrite rules of the loop-IR simplifier, as tables: one rule a line, `pattern ->
result [when condition]`, tried in order; the first that matches wins.

Patterns are ordinary expressions over wildcards: `x`, `y`, `z` match any expression,
`c1`, `c2` only a constant; a wildcard used twice must match equal subtrees. Plain
numbers in a pattern match a constant of that value in any dtype, and in a result they
take the dtype of the matched node's operands. A result may compute new constants
(`c2 - c1`): the simplifier folds them when it simplifies the result again.

A rule applies only to int64 (index) operands unless it is marked `exact`, which means
it is also exact for floats (NaN, infinities and signed zeros included) and for
wrapping integer dtypes. Sums, products and floordiv/floormod of index expressions are
not here: they go through the linear canonical form in `simplify.py`.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import dataclass, field

from ember.loop.analysis import LinearForm, VarRanges, to_linear
from ember.te.expr import (
    INDEX_DTYPE,
    Binary,
    Call,
    Cast,
    Const,
    Expr,
    Select,
    Unary,
    UnaryOp,
    equal,
    logical_and,
    logical_not,
    logical_or,
    maximum,
    minimum,
    not_equal,
)
from ember.te.visit import children, map_expr

ANY_DTYPE = "any"  # the dtype of a pattern's wildcards and plain numbers


@dataclass(frozen=True, slots=True)
class Wild(Expr):
    """A pattern variable; `constant` wildcards match only a Const."""

    name: str
    constant: bool = False

    @property
    def dtype(self) -> str:
        return ANY_DTYPE

    def expr_children(self) -> tuple[Expr, ...]:
        return ()

    def with_expr_children(self, children: tuple[Expr, ...]) -> Wild:
        return self

    def format(self, fmt: Callable[[Expr], str]) -> str:
        return self.name


x, y, z = Wild("x"), Wild("y"), Wild("z")
c1, c2 = Wild("c1", constant=True), Wild("c2", constant=True)
TRUE, FALSE = Const(True, "bool"), Const(False, "bool")


@dataclass(frozen=True, slots=True)
class Match:
    """The bindings of a successful match and what the conditions may ask about them."""

    bindings: Mapping[str, Expr]
    ranges: VarRanges = field(default_factory=dict)

    def __getitem__(self, wild: Wild) -> Expr:
        return self.bindings[wild.name]

    def value(self, wild: Wild) -> int | float | bool:
        constant = self[wild]
        assert isinstance(constant, Const)
        return constant.value

    def is_index(self, wild: Wild) -> bool:
        return self[wild].dtype == INDEX_DTYPE

    def _difference(self, a: Wild, b: Wild) -> LinearForm:
        return to_linear(self[a]) - to_linear(self[b])

    def proves_lt(self, a: Wild, b: Wild) -> bool:
        """`a < b` for every value of the variables in their ranges."""
        hi = self._difference(a, b).interval(self.ranges).hi
        return hi is not None and hi < 0

    def proves_le(self, a: Wild, b: Wild) -> bool:
        hi = self._difference(a, b).interval(self.ranges).hi
        return hi is not None and hi <= 0

    def proves_eq(self, a: Wild, b: Wild) -> bool:
        bounds = self._difference(a, b).interval(self.ranges)
        return bounds.lo == 0 and bounds.hi == 0

    def proves_ne(self, a: Wild, b: Wild) -> bool:
        return self.proves_lt(a, b) or self.proves_lt(b, a)


@dataclass(frozen=True, slots=True)
class Rule:
    pattern: Expr
    result: Expr
    when: Callable[[Match], bool] | None = None
    exact: bool = False


def rule_key(expr: Expr) -> object:
    """What a node is dispatched on: its operator (or node type)."""
    match expr:
        case Binary(op, _, _) | Unary(op, _):
            return op
    return type(expr)


def operand_dtype(expr: Expr) -> str:
    """The dtype a rule's applicability (index-only or exact) is judged by."""
    operands = children(expr)
    if isinstance(expr, Select):
        return expr.true_value.dtype
    return operands[0].dtype if operands else expr.dtype


def _match(pattern: Expr, expr: Expr, bindings: dict[str, Expr]) -> bool:
    match pattern:
        case Wild(name, constant):
            if constant and not isinstance(expr, Const):
                return False
            bound = bindings.setdefault(name, expr)
            return bound is expr or bound == expr
        case Const(value, dtype):
            return (
                isinstance(expr, Const)
                and (dtype == ANY_DTYPE or dtype == expr.dtype)
                and expr.value == value
            )
        case Binary(op, a, b):
            return (
                isinstance(expr, Binary)
                and expr.op is op
                and _match(a, expr.a, bindings)
                and _match(b, expr.b, bindings)
            )
        case Unary(op, a):
            return isinstance(expr, Unary) and expr.op is op and _match(a, expr.a, bindings)
        case Select() | Cast() | Call():
            if type(expr) is not type(pattern) or _node_data(expr) != _node_data(pattern):
                return False
            pairs = zip(children(pattern), children(expr), strict=True)
            return all(_match(p, e, bindings) for p, e in pairs)
    return pattern == expr


def _node_data(expr: Expr) -> object:
    match expr:
        case Cast(dtype, _):
            return dtype
        case Call(name, args):
            return (name, len(args))
    return None


def _instantiate(template: Expr, bindings: Mapping[str, Expr], dtype: str) -> Expr:
    def fill(node: Expr) -> Expr | None:
        if isinstance(node, Wild):
            return bindings[node.name]
        if isinstance(node, Const) and node.dtype == ANY_DTYPE:
            number = float(node.value) if dtype.startswith("float") else int(node.value)
            return Const(number, dtype)
        return None

    return map_expr(template, fill)


def apply_rules(expr: Expr, ranges: VarRanges) -> Expr | None:
    """The result of the first rule of `RULES` that rewrites `expr`, or None."""
    dtype = operand_dtype(expr)
    for rule in RULES.get(rule_key(expr), ()):
        if not rule.exact and dtype != INDEX_DTYPE:
            continue
        bindings: dict[str, Expr] = {}
        if not _match(rule.pattern, expr, bindings):
            continue
        if rule.when is not None and not rule.when(Match(bindings, ranges)):
            continue
        return _instantiate(rule.result, bindings, dtype)
    return None


def _rules(*rules: Rule) -> dict[object, tuple[Rule, ...]]:
    table: dict[object, list[Rule]] = {}
    for rule in rules:
        table.setdefault(rule_key(rule.pattern), []).append(rule)
    return {key: tuple(value) for key, value in table.items()}


def _index_operands(m: Match) -> bool:
    return m.is_index(x) and m.is_index(y)


# fmt: off
RULES = _rules(
    # -- arithmetic exact in every dtype (index arithmetic is canonicalised instead) --
    Rule(x * 1, x, exact=True),                                       # x*1 -> x
    Rule(1 * x, x, exact=True),                                       # 1*x -> x
    Rule(x / 1, x, exact=True),                                       # x/1 -> x
    Rule(x - 0, x, exact=True),                                       # x - 0 -> x (even -0.0)
    Rule(Unary(UnaryOp.NEG, -x), x, exact=True),                      # -(-x) -> x
    # -- min / max --
    Rule(minimum(x, x), x, exact=True),                               # min(x, x) -> x
    Rule(maximum(x, x), x, exact=True),                               # max(x, x) -> x
    Rule(minimum(x, y), x, when=lambda m: m.proves_le(x, y)),         # min(x, y) -> x when x <= y
    Rule(minimum(x, y), y, when=lambda m: m.proves_le(y, x)),         # min(x, y) -> y when y <= x
    Rule(maximum(x, y), y, when=lambda m: m.proves_le(x, y)),         # max(x, y) -> y when x <= y
    Rule(maximum(x, y), x, when=lambda m: m.proves_le(y, x)),         # max(x, y) -> x when y <= x
    Rule(minimum(c1, x), minimum(x, c1)),                             # min(c1, x) -> min(x, c1)
    Rule(maximum(c1, x), maximum(x, c1)),                             # max(c1, x) -> max(x, c1)
    # min(min(x, c1), c2) -> min(x, min(c1, c2))
    Rule(minimum(minimum(x, c1), c2), minimum(x, minimum(c1, c2))),
    # max(max(x, c1), c2) -> max(x, max(c1, c2))
    Rule(maximum(maximum(x, c1), c2), maximum(x, maximum(c1, c2))),
    Rule(minimum(x + c1, c2), minimum(x, c2 - c1) + c1),  # min(x + c1, c2) -> min(x, c2 - c1) + c1
    Rule(maximum(x + c1, c2), maximum(x, c2 - c1) + c1),  # max(x + c1, c2) -> max(x, c2 - c1) + c1
    # -- comparisons decided by the ranges of their variables --
    Rule(x < y, TRUE, when=lambda m: m.proves_lt(x, y)),              # x < y -> true when always
    Rule(x < y, FALSE, when=lambda m: m.proves_le(y, x)),             # x < y -> false when y <= x
    Rule(x <= y, TRUE, when=lambda m: m.proves_le(x, y)),             # x <= y -> true when always
    Rule(x <= y, FALSE, when=lambda m: m.proves_lt(y, x)),            # x <= y -> false when y < x
    Rule(x > y, TRUE, when=lambda m: m.proves_lt(y, x)),              # x > y -> true when always
    Rule(x > y, FALSE, when=lambda m: m.proves_le(x, y)),             # x > y -> false when x <= y
    Rule(x >= y, TRUE, when=lambda m: m.proves_le(y, x)),             # x >= y -> true when always
    Rule(x >= y, FALSE, when=lambda m: m.proves_lt(x, y)),            # x >= y -> false when x < y
    Rule(equal(x, y), TRUE, when=lambda m: m.proves_eq(x, y)),        # x == y -> true when always
    Rule(equal(x, y), FALSE, when=lambda m: m.proves_ne(x, y)),       # x == y -> false when never
    Rule(not_equal(x, y), TRUE, when=lambda m: m.proves_ne(x, y)),    # x != y -> true when always
    Rule(not_equal(x, y), FALSE, when=lambda m: m.proves_eq(x, y)),   # x != y -> false when never
    # constants move right, so a guard reads `index < bound`
    Rule(x + c1 < c2, x < c2 - c1),                                   # x + c1 < c2 -> x < c2 - c1
    Rule(x - c1 < c2, x < c2 + c1),                                   # x - c1 < c2 -> x < c2 + c1
    Rule(x + c1 <= c2, x <= c2 - c1),                                 # x + c1 <= c2 -> x <= c2 - c1
    Rule(x - c1 <= c2, x <= c2 + c1),                                 # x - c1 <= c2 -> x <= c2 + c1
    Rule(x + c1 > c2, x > c2 - c1),                                   # x + c1 > c2 -> x > c2 - c1
    Rule(x - c1 > c2, x > c2 + c1),                                   # x - c1 > c2 -> x > c2 + c1
    Rule(x + c1 >= c2, x >= c2 - c1),                                 # x + c1 >= c2 -> x >= c2 - c1
    Rule(x - c1 >= c2, x >= c2 + c1),                                 # x - c1 >= c2 -> x >= c2 + c1
    # -- logic (operands are pure, so dropping one never loses an effect) --
    Rule(logical_and(x, True), x, exact=True),                        # x && true -> x
    Rule(logical_and(True, x), x, exact=True),                        # true && x -> x
    Rule(logical_and(x, False), FALSE, exact=True),                   # x && false -> false
    Rule(logical_and(False, x), FALSE, exact=True),                   # false && x -> false
    Rule(logical_and(x, x), x, exact=True),                           # x && x -> x
    Rule(logical_or(x, False), x, exact=True),                        # x || false -> x
    Rule(logical_or(False, x), x, exact=True),                        # false || x -> x
    Rule(logical_or(x, True), TRUE, exact=True),                      # x || true -> true
    Rule(logical_or(True, x), TRUE, exact=True),                      # true || x -> true
    Rule(logical_or(x, x), x, exact=True),                            # x || x -> x
    Rule(logical_not(TRUE), FALSE, exact=True),                       # !true -> false
    Rule(logical_not(FALSE), TRUE, exact=True),                       # !false -> true
    Rule(logical_not(logical_not(x)), x, exact=True),                 # !!x -> x
    # negated integer comparisons flip (not for floats: NaN compares false both ways)
    Rule(logical_not(x < y), y <= x, when=_index_operands, exact=True),  # !(x < y) -> y <= x
    Rule(logical_not(x <= y), y < x, when=_index_operands, exact=True),  # !(x <= y) -> y < x
    Rule(logical_not(x > y), x <= y, when=_index_operands, exact=True),  # !(x > y) -> x <= y
    Rule(logical_not(x >= y), x < y, when=_index_operands, exact=True),  # !(x >= y) -> x < y
    # !(x == y) -> x != y
    Rule(logical_not(equal(x, y)), not_equal(x, y), when=_index_operands, exact=True),
    # !(x != y) -> x == y
    Rule(logical_not(not_equal(x, y)), equal(x, y), when=_index_operands, exact=True),
    # -- select --
    Rule(Select(TRUE, x, y), x, exact=True),                          # select(true, x, y) -> x
    Rule(Select(FALSE, x, y), y, exact=True),                         # select(false, x, y) -> y
    Rule(Select(z, x, x), x, exact=True),                             # select(c, x, x) -> x
)
# fmt: on
