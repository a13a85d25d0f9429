"""The base of code generators for C-like languages: one method per loop-IR node.

A `Renderer` turns one PrimFunc into source text. It owns what C and CUDA share:
readable unique names, indentation and block scopes, statement structure, scalar
expressions with C precedence (so indices read `A[i * 64 + k]`, not `A[((i*64)+k)]`),
row-major flattening of multi-dimensional indices, and small inline helper functions
(floor division, min/max, ...) emitted once, only when used. Subclasses fill in the
language: type names, function signature, parallel loops, allocation, vector values.

Which arguments are outputs is not declared: it is read off the body. A buffer the
kernel stores into is an output (`output_args`); every other argument is an input and
is passed as a pointer to const.
"""

from __future__ import annotations

import contextlib
import math
import re
from collections.abc import Iterator

import numpy as np

from ember.errors import CodegenError
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
    Seq,
    Stmt,
    Store,
    split_dtype,
)
from ember.loop.vectorize import flatten_index, lanes_of
from ember.names import C_KEYWORDS, NameSupply, c_identifier
from ember.te.expr import (
    Binary,
    BinaryOp,
    Call,
    Cast,
    Const,
    Expr,
    Select,
    Unary,
    UnaryOp,
    Var,
)

# C operator precedence, higher binds tighter.
PRIMARY, UNARY, MULTIPLICATIVE, ADDITIVE, RELATIONAL, EQUALITY = 16, 15, 13, 12, 10, 9
BIT_AND, BIT_OR, LOGICAL_AND, LOGICAL_OR, CONDITIONAL = 8, 6, 5, 4, 3

INFIX = {
    BinaryOp.ADD: ("+", ADDITIVE),
    BinaryOp.SUB: ("-", ADDITIVE),
    BinaryOp.MUL: ("*", MULTIPLICATIVE),
    BinaryOp.DIV: ("/", MULTIPLICATIVE),  # truncating for ints, like the interpreter
    BinaryOp.EQ: ("==", EQUALITY),
    BinaryOp.NE: ("!=", EQUALITY),
    BinaryOp.LT: ("<", RELATIONAL),
    BinaryOp.LE: ("<=", RELATIONAL),
    BinaryOp.GT: (">", RELATIONAL),
    BinaryOp.GE: (">=", RELATIONAL),
    BinaryOp.AND: ("&&", LOGICAL_AND),
    BinaryOp.OR: ("||", LOGICAL_OR),
}

# Operators C lacks, rendered as calls of helpers named `ember_<name>_<dtype>`.
HELPER_OPS = {
    BinaryOp.FLOOR_DIV: "floordiv",
    BinaryOp.FLOOR_MOD: "floormod",
    BinaryOp.MIN: "min",
    BinaryOp.MAX: "max",
}

# Operators that keep non-negative integer operands non-negative.
_NON_NEGATIVE_OPS = frozenset(
    {
        BinaryOp.ADD,
        BinaryOp.MUL,
        BinaryOp.FLOOR_DIV,
        BinaryOp.FLOOR_MOD,
        BinaryOp.MIN,
        BinaryOp.MAX,
    }
)
# C computes these in int; their wrap-around stays with the helpers.
_SMALL_INTS = frozenset({"int8", "int16", "uint8", "uint16"})

_LIBRARY_PREFIXES = ("ember_", "omp_", "__")
# Library functions and type names (stdint types, our vector typedefs) to steer clear of.
_LIBRARY_NAME = re.compile(
    r"^((exp|log|sqrt|tanh|erf|abs|fabs|floor|ceil|round|nearbyint|sin|cos|log1p|expm1|pow"
    r"|fmod|copysign)f?|u?int\d+_t|size_t|(u?int|float|bool)\d*x\d+)$"
)


def needs_checked_division(dtype: str, divisor: Expr) -> bool:
    """Whether integer division by `divisor` may trap in C (by 0, or INT_MIN by -1):
    then it goes through a helper that returns what NumPy does (0, or INT_MIN)."""
    if not split_dtype(dtype)[0].startswith(("int", "uint")):
        return False
    if isinstance(divisor, Broadcast):
        divisor = divisor.value
    return not (isinstance(divisor, Const) and int(divisor.value) not in (0, -1))


def written_buffers(stmt: Stmt) -> set[Buffer]:
    """Buffers that `stmt` stores into."""
    match stmt:
        case Store(buffer):
            return {buffer}
        case For(body=body) | Allocate(body=body) | LetStmt(body=body):
            return written_buffers(body)
        case Seq(stmts):
            return set().union(*(written_buffers(s) for s in stmts))
        case IfThenElse(_, then_body, else_body):
            written = written_buffers(then_body)
            return written if else_body is None else written | written_buffers(else_body)
    return set()


def output_args(func: PrimFunc) -> tuple[Buffer, ...]:
    """The arguments `func` writes (its outputs), in argument order."""
    written = written_buffers(func.body)
    return tuple(buffer for buffer in func.args if buffer in written)


class Names:
    """Readable, unique C identifiers for buffers (by identity) and variables (by
    name and dtype), avoiding keywords and the names generated code uses itself."""

    def __init__(self) -> None:
        self._by_key: dict[object, str] = {}
        self._supply = NameSupply(taken=C_KEYWORDS, clean=_c_name)

    def reserve(self, name: str) -> str:
        return self._supply.fresh(name)

    def of(self, key: Buffer | Var) -> str:
        name = self._by_key.get(key)
        if name is None:
            name = self._by_key[key] = self.reserve(key.name)
        return name


def _c_name(hint: str) -> str:
    """`hint` as a C identifier that is no library function, type or prefix."""
    name = c_identifier(hint) or "v"
    if name[0].isdigit() or name.startswith(_LIBRARY_PREFIXES) or _LIBRARY_NAME.match(name):
        name = f"v_{name.lstrip('_')}"
    return name


def const_steps(stmt: Stmt) -> float:
    """How many leaf statements `stmt` executes (inf when a loop bound is unknown);
    the measure `unroll_max_step` limits, as TVM's auto_unroll_max_step does."""
    match stmt:
        case For(_, extent, _, body):
            count = extent.value if isinstance(extent, Const) else math.inf
            return float(count) * const_steps(body)
        case Seq(stmts):
            return sum(const_steps(s) for s in stmts)
        case IfThenElse(_, then_body, else_body):
            other = 0.0 if else_body is None else const_steps(else_body)
            return max(const_steps(then_body), other)
        case Allocate(body=body) | LetStmt(body=body):
            return const_steps(body)
    return 1.0


class Renderer:
    """Base renderer; `render()` returns the whole translation unit."""

    indent_unit = "  "
    # Fully unroll UNROLLED loops up to this extent; longer ones get a pragma.
    max_explicit_unroll = 64
    helper_qualifier = "static inline"

    def __init__(self, func: PrimFunc) -> None:
        self.func = func
        self.names = Names()
        self.lines: list[str] = []
        self.depth = 0
        self.scopes: list[set[str]] = [set()]
        self.helpers: dict[str, str] = {}  # name -> definition, in dependency order
        self.unroll_budget = 0
        self.loop_depth = 0  # loops around the statement being rendered
        # Variables of the enclosing loops (all run from 0: never negative).
        self.loop_vars: set[Var] = set()

    # -- language tables (subclasses override) -------------------------------------

    def scalar_type(self, dtype: str) -> str:
        raise NotImplementedError

    def render(self) -> str:
        raise NotImplementedError

    # -- output helpers ------------------------------------------------------------

    def emit(self, line: str) -> None:
        self.lines.append(f"{self.indent_unit * self.depth}{line}" if line else "")

    def block(self, header: str) -> _Block:
        """`with self.block("for (...)"):` emits `header {`, the body, then `}`."""
        return _Block(self, header)

    def declare(self, name: str) -> bool:
        """Record a declaration in the current block; False if it would clash there."""
        if name in self.scopes[-1]:
            return False
        self.scopes[-1].add(name)
        return True

    def helper(self, name: str, definition: str) -> str:
        """Register helper function `name` (emitted once, before the kernel)."""
        if name not in self.helpers:
            self.helpers[name] = definition
        return name

    def body_lines(self) -> list[str]:
        """Render the function body statements (into a fresh line list)."""
        saved, self.lines = self.lines, []
        self.depth += 1
        self.stmt(self.func.body)
        self.depth -= 1
        lines, self.lines = self.lines, saved
        return lines

    # -- statements ------------------------------------------------------------------

    def stmt(self, stmt: Stmt) -> None:
        match stmt:
            case For():
                self.for_loop(stmt)
            case Store():
                self.store(stmt)
            case Allocate():
                self.allocate(stmt)
            case IfThenElse():
                self.if_then_else(stmt)
            case Seq(stmts):
                for s in stmts:
                    self.stmt(s)
            case LetStmt():
                self.let(stmt)
            case _:
                raise CodegenError(f"cannot render statement {type(stmt).__name__}")

    def for_loop(self, loop: For) -> None:
        extent = loop.extent.value if isinstance(loop.extent, Const) else None
        explicit = extent is not None and extent <= self.max_explicit_unroll
        if loop.kind is ForKind.UNROLLED and explicit:
            self.unrolled_loop(loop, int(loop.extent.value))  # type: ignore[attr-defined]
            return
        if loop.kind is ForKind.VECTORIZED:
            raise CodegenError(
                "a VECTORIZED loop reached the renderer: the backend's passes (vectorize or "
                "scalarize) must run before rendering"
            )
        pragma = self.loop_pragma(loop)
        if pragma:
            self.emit(pragma)
        name = self.names.of(loop.var)
        header = (
            f"for ({self.scalar_type(loop.var.dtype)} {name} = 0; "
            f"{name} < {self.expr(loop.extent)}; ++{name})"
        )
        saved = self.unroll_budget
        self.unroll_budget = max(self.unroll_budget, loop.unroll_max_step)
        self.loop_depth += 1
        with self.bound(loop.var, is_loop=True), self.block(header):
            self.stmt(loop.body)
        self.loop_depth -= 1
        self.unroll_budget = saved

    def loop_pragma(self, loop: For) -> str | None:
        """A line to put before the loop (parallel or unroll pragmas)."""
        if loop.kind is ForKind.UNROLLED:
            return "#pragma GCC unroll 64"
        budget = self.unroll_budget
        steps = const_steps(loop)
        if loop.kind is ForKind.SERIAL and budget and steps <= budget:
            return f"#pragma GCC unroll {int(loop.extent.value)}"  # type: ignore[attr-defined]
        return None

    def unrolled_loop(self, loop: For, extent: int) -> None:
        """Emit the body once per iteration, each in a block binding the loop var."""
        name = self.names.of(loop.var)
        self.emit(f"// {name} unrolled: 0..{extent - 1}")
        for i in range(extent):
            with self.block(""), self.bound(loop.var, is_loop=True):
                self.emit(f"const {self.scalar_type(loop.var.dtype)} {name} = {i};")
                self.declare(name)
                self.stmt(loop.body)

    @contextlib.contextmanager
    def bound(self, var: Var, is_loop: bool) -> Iterator[None]:
        """Within: `var` is bound by a loop (`is_loop`) or by something else."""
        was_loop = var in self.loop_vars
        if is_loop:
            self.loop_vars.add(var)
        else:
            self.loop_vars.discard(var)
        try:
            yield
        finally:
            if was_loop:
                self.loop_vars.add(var)
            else:
                self.loop_vars.discard(var)

    def non_negative(self, expr: Expr) -> bool:
        """Whether integer `expr` is never negative: built from loop variables and
        non-negative constants by +, *, floor division and modulo, min and max."""
        match expr:
            case Const(value):
                return not isinstance(value, float) and int(value) >= 0
            case Var():
                return expr in self.loop_vars
            case Binary(op, a, b) if op in _NON_NEGATIVE_OPS:
                return self.non_negative(a) and self.non_negative(b)
        return False

    def store(self, store: Store) -> None:
        index = self.flat_index(store.buffer, store.indices)
        self.emit(f"{self.names.of(store.buffer)}[{index}] = {self.expr(store.value)};")

    def let(self, let: LetStmt) -> None:
        name = self.names.of(let.var)
        line = f"const {self.value_type(let.var.dtype)} {name} = {self.expr(let.value)};"
        with self.bound(let.var, is_loop=False):
            if self.declare(name):
                self.emit(line)
                self.stmt(let.body)
                return
            with self.block(""):  # the same variable bound again in this block
                self.emit(line)
                self.declare(name)
                self.stmt(let.body)

    def allocate(self, allocate: Allocate) -> None:
        raise NotImplementedError

    def if_then_else(self, stmt: IfThenElse) -> None:
        with self.block(f"if ({self.expr(stmt.condition)})"):
            self.stmt(stmt.then_body)
        if stmt.else_body is not None:
            # Reopen as "} else {" for the usual C layout.
            self.lines[-1] += " else {"
            self._enter()
            self.stmt(stmt.else_body)
            self._leave()

    def _enter(self) -> None:
        self.depth += 1
        self.scopes.append(set())

    def _leave(self) -> None:
        self.depth -= 1
        self.scopes.pop()
        self.emit("}")

    # -- expressions -------------------------------------------------------------------

    def value_type(self, dtype: str) -> str:
        """The C type of a (scalar or vector) value of `dtype`."""
        return self.scalar_type(dtype)

    def expr(self, expr: Expr) -> str:
        return self.rendered(expr)[0]

    def wrapped(self, expr: Expr, precedence: int) -> str:
        """`expr`, parenthesised if it binds less tightly than `precedence`."""
        text, own = self.rendered(expr)
        return text if own >= precedence else f"({text})"

    def rendered(self, expr: Expr) -> tuple[str, int]:
        """Text and precedence of `expr`."""
        if isinstance(expr, Var):
            return self.names.of(expr), PRIMARY
        if lanes_of(expr) > 1:
            return self.vector_expr(expr)
        return self.scalar_expr(expr)

    def scalar_expr(self, expr: Expr) -> tuple[str, int]:
        """Text and precedence of a scalar expression node (its operands may be vectors
        only for a Select with a scalar condition)."""
        match expr:
            case Const():
                return self.const(expr)
            case Binary():
                return self.binary(expr)
            case Unary(op, a):
                return self.unary("-" if op is UnaryOp.NEG else "!", a), UNARY
            case Select(condition, true_value, false_value):
                return (
                    f"{self.wrapped(condition, LOGICAL_OR)} ? {self.expr(true_value)} : "
                    f"{self.wrapped(false_value, CONDITIONAL)}",
                    CONDITIONAL,
                )
            case Cast(dtype, value):
                return f"({self.scalar_type(dtype)}){self.wrapped(value, UNARY)}", UNARY
            case Call(name, args):
                return self.call(name, args, expr.dtype), PRIMARY
            case Load(buffer, indices):
                index = self.flat_index(buffer, indices)
                return f"{self.names.of(buffer)}[{index}]", PRIMARY
        raise CodegenError(f"cannot render expression {type(expr).__name__}: {expr}")

    def unary(self, symbol: str, operand: Expr) -> str:
        text = self.wrapped(operand, UNARY)
        # "- -x" would read as the decrement operator "--x".
        return f"{symbol}({text})" if text.startswith(("-", "!", "~")) else f"{symbol}{text}"

    def vector_expr(self, expr: Expr) -> tuple[str, int]:
        raise CodegenError(f"{type(self).__name__} cannot render vector expression {expr}")

    def flat_index(self, buffer: Buffer, indices: tuple[Expr, ...]) -> str:
        if any(isinstance(i, (Ramp, Broadcast)) or lanes_of(i) > 1 for i in indices):
            raise CodegenError(f"vector index of {buffer.name} in a scalar access")
        return self.expr(flatten_index(buffer, indices))

    def const(self, const: Const) -> tuple[str, int]:
        dtype, value = const.dtype, const.value
        if dtype == "bool":
            return ("1" if value else "0"), PRIMARY
        if dtype.startswith("float"):
            return self.float_const(float(value), dtype)
        number = int(value)
        if -(2**31) <= number < 2**31:
            return str(number), (UNARY if number < 0 else PRIMARY)
        if number == -(2**63):  # its digits alone overflow int64 (C has no negative literal)
            return "INT64_MIN", PRIMARY
        macro = "UINT64_C" if dtype.startswith("uint") else "INT64_C"
        return f"{macro}({number})", PRIMARY

    def float_const(self, value: float, dtype: str) -> tuple[str, int]:
        suffix = "f" if dtype == "float32" else ""
        if math.isnan(value):
            return f"({self.scalar_type(dtype)})NAN", UNARY
        if math.isinf(value):
            sign = "-" if value < 0 else ""
            return f"{sign}({self.scalar_type(dtype)})INFINITY", UNARY
        # The shortest decimal that reads back as the same value of this width.
        text = str(np.float32(value)) if dtype == "float32" else repr(value)
        if "." not in text and "e" not in text and "inf" not in text:
            text += ".0"
        return f"{text}{suffix}", (UNARY if value < 0 or text.startswith("-") else PRIMARY)

    def binary(self, expr: Binary) -> tuple[str, int]:
        op, dtype = expr.op, expr.a.dtype
        if op in (BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD) and self.truncates_like_floor(expr):
            # Both non-negative: C's truncating / and % agree with floor division.
            symbol = "/" if op is BinaryOp.FLOOR_DIV else "%"
            text = f"{self.wrapped(expr.a, MULTIPLICATIVE)} {symbol} "
            return text + self.wrapped(expr.b, MULTIPLICATIVE + 1), MULTIPLICATIVE
        helper = HELPER_OPS.get(op)
        if op is BinaryOp.DIV and needs_checked_division(dtype, expr.b):
            helper = "div"
        if helper is not None:
            name = self.scalar_helper(helper, dtype)
            return f"{name}({self.expr(expr.a)}, {self.expr(expr.b)})", PRIMARY
        symbol, precedence = INFIX[op]
        # Left-associative: the right operand needs strictly tighter binding, except for
        # associative operators: && and ||, and integer + and * (not float arithmetic).
        associative = op.is_logical or (
            op in (BinaryOp.ADD, BinaryOp.MUL) and dtype.startswith(("int", "uint"))
        )
        # ... and only when the right operand is the same operator: a * (b / c) is not
        # a * b / c.
        associative = associative and isinstance(expr.b, Binary) and expr.b.op is op
        right = precedence if associative else precedence + 1
        text = f"{self.wrapped(expr.a, precedence)} {symbol} {self.wrapped(expr.b, right)}"
        if dtype in ("int8", "int16", "uint8", "uint16") and not (
            op.is_comparison or op.is_logical
        ):
            # C computes small integers in int; wrap like the dtype does.
            return f"({self.scalar_type(dtype)})({text})", UNARY
        return text, precedence

    def truncates_like_floor(self, expr: Binary) -> bool:
        """An integer floor division or modulo by a positive constant of a value that
        is never negative (index arithmetic of fused loops)."""
        if not expr.dtype.startswith(("int", "uint")) or expr.dtype in _SMALL_INTS:
            return False
        divisor = expr.b
        positive = isinstance(divisor, Const) and int(divisor.value) > 0
        return positive and self.non_negative(expr.a)

    def call(self, name: str, args: tuple[Expr, ...], dtype: str) -> str:
        raise NotImplementedError

    def scalar_helper(self, op: str, dtype: str) -> str:
        raise NotImplementedError


class _Block:
    """Context manager for a braced block with its own declaration scope."""

    def __init__(self, renderer: Renderer, header: str) -> None:
        self.renderer = renderer
        self.header = header

    def __enter__(self) -> None:
        self.renderer.emit(f"{self.header} {{" if self.header else "{")
        self.renderer._enter()

    def __exit__(self, *exc: object) -> None:
        self.renderer._leave()
