"""Loop IR: the imperative program a schedule lowers to, and codegen renders.

Expressions are `ember.te.expr` nodes plus three loop-level ones: `Load` (a buffer
read), and the vector forms `Ramp` (base, base+stride, ...) and `Broadcast`. A vector
expression's dtype carries its lanes: `"float32x16"`, `"int64x8"`.

Statements: `For` (serial, parallel, vectorized, unrolled; always from 0), `Store`,
`Allocate` (a buffer live for its body; scope "global" or "local" = registers/stack),
`IfThenElse`, `Seq`, `LetStmt`. A kernel is a `PrimFunc` over buffer arguments.
"""

from __future__ import annotations

import enum
from collections.abc import Callable, Iterator
from dataclasses import dataclass

from ember.te.expr import Expr, Var


def vector_dtype(dtype: str, lanes: int) -> str:
    return dtype if lanes == 1 else f"{dtype}x{lanes}"


def split_dtype(dtype: str) -> tuple[str, int]:
    """`"float32x16"` -> ("float32", 16); `"float32"` -> ("float32", 1)."""
    base, _, lanes = dtype.partition("x")
    return base, int(lanes) if lanes else 1


@dataclass(frozen=True, slots=True, eq=False)
class Buffer:
    """A named array. Identity matters (two buffers may share a name in different
    kernels); `scope` is "global" (argument or heap) or "local" (stack/registers)."""

    name: str
    shape: tuple[int, ...]
    dtype: str
    scope: str = "global"

    @property
    def size(self) -> int:
        total = 1
        for extent in self.shape:
            total *= extent
        return total

    def __repr__(self) -> str:
        return f"Buffer({self.name}, {list(self.shape)}, {self.dtype}, {self.scope})"


# -- loop-level expressions ---------------------------------------------------------


@dataclass(frozen=True, slots=True)
class Load(Expr):
    """`buffer[indices]`; a vector load when an index is a vector (Ramp). A vector load
    may carry a `predicate`, a bool vector of its lanes: only the lanes where it holds
    are read, the others are zero (the tail vector of a row, `vectorize`), and nothing
    may depend on those but lanes that a store's predicate or a select on the same
    test discards."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    predicate: Expr | None = None

    @property
    def dtype(self) -> str:
        lanes = max((split_dtype(i.dtype)[1] for i in self.indices), default=1)
        return vector_dtype(self.buffer.dtype, lanes)

    def expr_children(self) -> tuple[Expr, ...]:
        return self.indices if self.predicate is None else (*self.indices, self.predicate)

    def with_expr_children(self, children: tuple[Expr, ...]) -> Load:
        if self.predicate is None:
            return Load(self.buffer, children)
        return Load(self.buffer, children[:-1], children[-1])

    def format(self, fmt: Callable[[Expr], str]) -> str:
        where = "" if self.predicate is None else f" where {fmt(self.predicate)}"
        return f"{self.buffer.name}[{', '.join(fmt(i) for i in self.indices)}{where}]"


@dataclass(frozen=True, slots=True)
class Ramp(Expr):
    """The vector `base, base + stride, ..., base + (lanes - 1) * stride`."""

    base: Expr
    stride: int
    lanes: int

    @property
    def dtype(self) -> str:
        return vector_dtype(self.base.dtype, self.lanes)

    def expr_children(self) -> tuple[Expr, ...]:
        return (self.base,)

    def with_expr_children(self, children: tuple[Expr, ...]) -> Ramp:
        return Ramp(children[0], self.stride, self.lanes)

    def format(self, fmt: Callable[[Expr], str]) -> str:
        return f"ramp({fmt(self.base)}, {self.stride}, {self.lanes})"


@dataclass(frozen=True, slots=True)
class Broadcast(Expr):
    """A scalar repeated in every lane."""

    value: Expr
    lanes: int

    @property
    def dtype(self) -> str:
        return vector_dtype(self.value.dtype, self.lanes)

    def expr_children(self) -> tuple[Expr, ...]:
        return (self.value,)

    def with_expr_children(self, children: tuple[Expr, ...]) -> Broadcast:
        return Broadcast(children[0], self.lanes)

    def format(self, fmt: Callable[[Expr], str]) -> str:
        return f"broadcast({fmt(self.value)}, {self.lanes})"


# -- statements -----------------------------------------------------------------------


class Stmt:
    """Base of statements."""

    __slots__ = ()

    def __str__(self) -> str:
        from ember.loop.printer import format_stmt

        return format_stmt(self)


class ForKind(enum.Enum):
    SERIAL = "serial"
    PARALLEL = "parallel"
    VECTORIZED = "vectorized"
    UNROLLED = "unrolled"


@dataclass(frozen=True, slots=True)
class For(Stmt):
    """`for var in 0 .. extent-1`. `unroll_max_step` > 0 asks codegen to unroll inner
    serial loops up to that many iterations (the auto_unroll_max_step pragma)."""

    var: Var
    extent: Expr
    kind: ForKind
    body: Stmt
    unroll_max_step: int = 0


@dataclass(frozen=True, slots=True)
class Store(Stmt):
    """`buffer[indices] = value`. A vector store may carry a `predicate`, a bool vector
    of its lanes: only the lanes where it holds are written (the tail of an output row
    that whole vectors overrun). `vectorize` makes such predicates from affine tests
    of the lane, so the lanes that hold are one contiguous run: all of them hold when
    the first and the last do."""

    buffer: Buffer
    indices: tuple[Expr, ...]
    value: Expr
    predicate: Expr | None = None


@dataclass(frozen=True, slots=True)
class Allocate(Stmt):
    buffer: Buffer
    body: Stmt


@dataclass(frozen=True, slots=True)
class IfThenElse(Stmt):
    condition: Expr
    then_body: Stmt
    else_body: Stmt | None = None


@dataclass(frozen=True, slots=True)
class Seq(Stmt):
    stmts: tuple[Stmt, ...]


@dataclass(frozen=True, slots=True)
class LetStmt(Stmt):
    """Bind `var` to `value` (evaluated once) within `body`."""

    var: Var
    value: Expr
    body: Stmt


@dataclass(frozen=True, slots=True)
class PrimFunc:
    """A kernel: `name(args...)` where args are global buffers (inputs, then outputs)."""

    name: str
    args: tuple[Buffer, ...]
    body: Stmt

    def __str__(self) -> str:
        from ember.loop.printer import format_func

        return format_func(self)


def stmt_exprs(stmt: Stmt) -> Iterator[Expr]:
    """Every expression `stmt` holds (stores' indices, values and predicates, loop
    extents, conditions, let values), outermost first."""
    match stmt:
        case Store(_, indices, value, predicate):
            yield from indices
            yield value
            if predicate is not None:
                yield predicate
        case For(_, extent, _, body):
            yield extent
            yield from stmt_exprs(body)
        case Seq(stmts):
            for s in stmts:
                yield from stmt_exprs(s)
        case IfThenElse(condition, then_body, else_body):
            yield condition
            yield from stmt_exprs(then_body)
            if else_body is not None:
                yield from stmt_exprs(else_body)
        case LetStmt(_, value, body):
            yield value
            yield from stmt_exprs(body)
        case Allocate(_, body):
            yield from stmt_exprs(body)


def walk_stmts(stmt: Stmt) -> Iterator[Stmt]:
    """Every statement inside `stmt` (itself included), pre-order."""
    yield stmt
    match stmt:
        case For(body=body) | Allocate(body=body) | LetStmt(body=body):
            yield from walk_stmts(body)
        case IfThenElse(then_body=then_body, else_body=else_body):
            yield from walk_stmts(then_body)
            if else_body is not None:
                yield from walk_stmts(else_body)
        case Seq(stmts=children):
            for child in children:
                yield from walk_stmts(child)


def rewrite_stmts(stmt: Stmt, rewrite: Callable[[Stmt], Stmt | None]) -> Stmt:
    """`stmt` rebuilt bottom-up: each statement's children first, then `rewrite` of the
    statement with its new children (None keeps it). Subtrees nothing rewrote are
    returned as the same objects, so a pass that changes nothing returns its input."""
    match stmt:
        case For(var, extent, kind, body, unroll):
            new_body = rewrite_stmts(body, rewrite)
            rebuilt: Stmt = stmt if new_body is body else For(var, extent, kind, new_body, unroll)
        case Seq(stmts):
            new = tuple(rewrite_stmts(s, rewrite) for s in stmts)
            rebuilt = stmt if all(a is b for a, b in zip(new, stmts, strict=True)) else seq(*new)
        case IfThenElse(condition, then_body, else_body):
            then_new = rewrite_stmts(then_body, rewrite)
            else_new = None if else_body is None else rewrite_stmts(else_body, rewrite)
            unchanged = then_new is then_body and else_new is else_body
            rebuilt = stmt if unchanged else IfThenElse(condition, then_new, else_new)
        case Allocate(buffer, body):
            new_body = rewrite_stmts(body, rewrite)
            rebuilt = stmt if new_body is body else Allocate(buffer, new_body)
        case LetStmt(var, value, body):
            new_body = rewrite_stmts(body, rewrite)
            rebuilt = stmt if new_body is body else LetStmt(var, value, new_body)
        case _:
            rebuilt = stmt
    result = rewrite(rebuilt)
    return rebuilt if result is None else result


def rewrite_func(func: PrimFunc, rewrite: Callable[[Stmt], Stmt | None]) -> PrimFunc:
    """`func` with its body rebuilt by `rewrite_stmts`; `func` itself if unchanged."""
    body = rewrite_stmts(func.body, rewrite)
    return func if body is func.body else PrimFunc(func.name, func.args, body)


def seq(*stmts: Stmt) -> Stmt:
    """A sequence, flattened; a single statement is returned as is."""
    flat: list[Stmt] = []
    for stmt in stmts:
        flat.extend(stmt.stmts if isinstance(stmt, Seq) else (stmt,))
    return flat[0] if len(flat) == 1 else Seq(tuple(flat))
