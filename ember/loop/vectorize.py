"""The vectorize pass: VECTORIZED loops become straight-line vector code.

`vectorize(func) -> func`. Pre: loop IR with For loops of any kind. Post: no For of kind
VECTORIZED remains. Each such loop with a constant power-of-two extent (the lanes, 2 to
64) is replaced by its body in which the loop variable is `Ramp(0, 1, lanes)`:

- arithmetic propagates affine forms: `ramp + s` shifts the base, `ramp * c` scales the
  stride, anything else broadcasts its scalar operands and yields a general vector;
- a Load or Store keeps its (multi-dimensional) indices, each either a scalar (the same
  in every lane) or a vector; code generation flattens them and emits a contiguous
  access when the flat index is a stride-1 Ramp, a gather or scatter otherwise;
- a Select with a scalar condition stays lazy; one with a vector condition evaluates
  both branches in every lane, so it is only vectorized when both branches provably
  cannot fault (every Load in bounds, no integer division by a non-constant);
- inner serial/unrolled loops and ifs are kept (the vector loop moves inside them,
  legal because the lanes of a VECTORIZED loop are independent);
- a tail (a split whose vectors overrun a row, guarded by an affine test of the lane
  that holds on one run of lanes): a guarded contiguous store whose value is safe in
  every lane becomes a predicated Store (the matrix tile's last columns); otherwise
  the loop is versioned, `if (first and last lane pass) vector code with the tests
  dropped else the tail`, for a guard around the body or selects whose taken branch
  could fault (rfactor's tail). Where every test is the same, the tail is vector code
  too: the loads its test guards that could fault read only the lanes that pass (a
  predicated Load), and its stores are predicated; else it is the serial loop.

Like PARALLEL, the VECTORIZED annotation asserts that iterations are independent (the
schedule's legality checks own that); the pass still refuses the cross-lane patterns it
can see. A loop that cannot be vectorized falls back to a SERIAL loop, never to wrong
code: an extent that is not a constant power of two, an Allocate, a parallel loop or a
loop bound depending on the lane, an if on the lane that is no tail, a store whose
index does not depend on the lane or is not affine in it, a buffer stored at two
different indices or read at another index than it is stored at (a cross-lane
dependence), or a faulting lazy branch.

The index helpers (`add`, `multiply`, `flatten_index`) are shared with code generation.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Mapping
from contextlib import contextmanager
from dataclasses import dataclass

from ember.loop.analysis import Interval, const_interval
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
    vector_dtype,
)
from ember.loop.simplify import simplify_expr
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
from ember.te.visit import free_vars, map_expr, walk

MAX_LANES = 64


class _CannotVectorize(Exception):
    """Raised inside the pass; the loop then stays serial."""


def vectorize(func: PrimFunc) -> PrimFunc:
    """Rewrite every VECTORIZED loop of `func` into vector code (or a serial loop)."""
    body = _rewrite(func.body, {})
    return func if body is func.body else PrimFunc(func.name, func.args, body)


# -- vector-aware index arithmetic ---------------------------------------------------


def lanes_of(expr: Expr) -> int:
    return split_dtype(expr.dtype)[1]


def broadcast_to(expr: Expr, lanes: int) -> Expr:
    """`expr` as a vector of `lanes` (scalars are broadcast; vectors are returned)."""
    return expr if lanes == 1 or lanes_of(expr) == lanes else Broadcast(expr, lanes)


def _int_const(expr: Expr) -> int | None:
    if isinstance(expr, Const) and not isinstance(expr.value, (bool, float)):
        return int(expr.value)
    return None


def _ramp(base: Expr, stride: int, lanes: int) -> Expr:
    return Broadcast(base, lanes) if stride == 0 else Ramp(base, stride, lanes)


def add(a: Expr, b: Expr) -> Expr:
    """`a + b` on integer scalars or vectors, keeping Ramps affine; folds constants."""
    ca, cb = _int_const(a), _int_const(b)
    if ca is not None and cb is not None:
        return Const(ca + cb, a.dtype)
    if cb == 0:
        return a
    if ca == 0:
        return b
    match a, b:
        case Ramp(), Ramp():
            return _ramp(add(a.base, b.base), a.stride + b.stride, a.lanes)
        case Ramp(), Broadcast():
            return Ramp(add(a.base, b.value), a.stride, a.lanes)
        case Broadcast(), Ramp():
            return Ramp(add(a.value, b.base), b.stride, b.lanes)
        case Broadcast(), Broadcast():
            return Broadcast(add(a.value, b.value), a.lanes)
        case Ramp(), _ if lanes_of(b) == 1:
            return Ramp(add(a.base, b), a.stride, a.lanes)
        case _, Ramp() if lanes_of(a) == 1:
            return Ramp(add(a, b.base), b.stride, b.lanes)
        case Broadcast(), _ if lanes_of(b) == 1:
            return Broadcast(add(a.value, b), a.lanes)
        case _, Broadcast() if lanes_of(a) == 1:
            return Broadcast(add(a, b.value), b.lanes)
    return _vector_binary(BinaryOp.ADD, a, b)


def negate(a: Expr) -> Expr:
    constant = _int_const(a)
    if constant is not None:
        return Const(-constant, a.dtype)
    if isinstance(a, Ramp):
        return _ramp(negate(a.base), -a.stride, a.lanes)
    if isinstance(a, Broadcast):
        return Broadcast(negate(a.value), a.lanes)
    return Unary(UnaryOp.NEG, a)


def subtract(a: Expr, b: Expr) -> Expr:
    ca, cb = _int_const(a), _int_const(b)
    if ca is not None and cb is not None:
        return Const(ca - cb, a.dtype)
    if cb == 0:
        return a
    if isinstance(b, (Ramp, Broadcast)) or (isinstance(a, Ramp) and lanes_of(b) == 1):
        return add(a, negate(b))
    return _vector_binary(BinaryOp.SUB, a, b)


def multiply(a: Expr, b: Expr) -> Expr:
    """`a * b` on integer scalars or vectors; a Ramp times a constant stays a Ramp."""
    ca, cb = _int_const(a), _int_const(b)
    if ca is not None and cb is not None:
        return Const(ca * cb, a.dtype)
    if ca is not None:
        a, b, ca, cb = b, a, cb, ca
    if cb == 1:
        return a
    if cb is not None:
        if isinstance(a, Ramp):
            return _ramp(multiply(a.base, b), a.stride * cb, a.lanes)
        if isinstance(a, Broadcast):
            return Broadcast(multiply(a.value, b), a.lanes)
        if cb == 0 and lanes_of(a) == 1:
            return Const(0, a.dtype)
    if isinstance(a, Broadcast) and lanes_of(b) == 1:
        return Broadcast(multiply(a.value, b), a.lanes)
    if isinstance(b, Broadcast) and lanes_of(a) == 1:
        return Broadcast(multiply(a, b.value), b.lanes)
    return _vector_binary(BinaryOp.MUL, a, b)


def _vector_binary(op: BinaryOp, a: Expr, b: Expr) -> Expr:
    lanes = max(lanes_of(a), lanes_of(b))
    return Binary(op, broadcast_to(a, lanes), broadcast_to(b, lanes))


def flatten_index(buffer: Buffer, indices: tuple[Expr, ...]) -> Expr:
    """The row-major flat index of `buffer[indices]` (scalar or vector), in Horner
    form `(i0 * d1 + i1) * d2 + i2` so it reads like hand-written C."""
    if len(indices) != len(buffer.shape):
        raise ValueError(
            f"buffer {buffer.name} has {len(buffer.shape)} dimensions, indexed with {len(indices)}"
        )
    if not indices:
        return Const(0)
    flat = indices[0]
    for extent, index in zip(buffer.shape[1:], indices[1:], strict=True):
        flat = add(multiply(flat, Const(extent, index.dtype.split("x")[0])), index)
    return flat


# -- statements ------------------------------------------------------------------------


def _rewrite(stmt: Stmt, bounds: Mapping[Var, Interval]) -> Stmt:
    """Vectorize VECTORIZED loops bottom-up; `bounds` holds enclosing loop ranges."""
    match stmt:
        case For(var, extent, kind, body, unroll):
            new_body = _rewrite(body, _bind(bounds, var, _loop_bound(extent)))
            if kind is ForKind.VECTORIZED:
                serial = For(var, extent, ForKind.SERIAL, new_body, unroll)
                try:
                    return _vectorize_loop(var, extent, new_body, bounds)
                except _CannotVectorize:
                    pass
                try:
                    return _versioned(var, extent, new_body, bounds, serial)
                except _CannotVectorize:
                    return serial
            return stmt if new_body is body else For(var, extent, kind, new_body, unroll)
        case Seq(stmts):
            new = tuple(_rewrite(s, bounds) for s in stmts)
            return stmt if all(a is b for a, b in zip(new, stmts, strict=True)) else Seq(new)
        case IfThenElse(condition, then_body, else_body):
            then_new = _rewrite(then_body, bounds)
            else_new = None if else_body is None else _rewrite(else_body, bounds)
            if then_new is then_body and else_new is else_body:
                return stmt
            return IfThenElse(condition, then_new, else_new)
        case Allocate(buffer, body):
            new_body = _rewrite(body, bounds)
            return stmt if new_body is body else Allocate(buffer, new_body)
        case LetStmt(var, value, body):
            new_body = _rewrite(body, _bind(bounds, var, const_interval(value, bounds)))
            return stmt if new_body is body else LetStmt(var, value, new_body)
    return stmt


def _loop_bound(extent: Expr) -> Interval | None:
    count = _int_const(extent)
    return Interval.extent(count) if count is not None and count > 0 else None


def _bind(bounds: Mapping[Var, Interval], var: Var, known: Interval | None) -> dict[Var, Interval]:
    """`bounds` inside a new binding of `var` (which shadows any outer one)."""
    inner = {v: b for v, b in bounds.items() if v != var}
    if known is not None:
        inner[var] = known
    return inner


def _vectorize_loop(var: Var, extent: Expr, body: Stmt, bounds: Mapping[Var, Interval]) -> Stmt:
    lanes, scope = _lanes_and_scope(var, extent, bounds)
    _check_no_cross_lane_dependence(body)
    return _LoopVectorizer(lanes).stmt(body, scope)


def _lanes_and_scope(var: Var, extent: Expr, bounds: Mapping[Var, Interval]) -> tuple[int, _Scope]:
    """The lanes of a vectorized loop (its extent, a constant power of two) and the
    scope of its body, where `var` is the Ramp of the lanes."""
    lanes = _int_const(extent)
    if lanes is None or lanes < 2 or lanes > MAX_LANES or lanes & (lanes - 1):
        raise _CannotVectorize(f"extent {extent} is not a constant power of two")
    scope = _Scope({}, bounds).bind(
        var, Ramp(Const(0, var.dtype), 1, lanes), Interval.extent(lanes)
    )
    return lanes, scope


def _versioned(
    var: Var, extent: Expr, body: Stmt, bounds: Mapping[Var, Interval], serial: For
) -> Stmt:
    """A loop whose body is guarded by affine tests of the lane (a vector that runs
    past the end of a row: `split` with a tail; an if around the body, or selects
    whose taken branch could fault, as rfactor's tail makes) as `if (the first and the
    last lane pass every test) vector code else the tail`: whole vectors run
    vectorized with the tests dropped. The one tail vector of a row runs as vector
    code too where every test is the same (`_TailVectorizer`), else serially."""
    lanes, scope = _lanes_and_scope(var, extent, bounds)
    vectorizer, known = _LoopVectorizer(lanes), {*bounds, var}
    tests: list[Expr] = []

    def lane_test(condition: Expr) -> Expr | None:
        """The vector form of a test to version on, or None if it is not one."""
        if not free_vars(condition) <= known:
            return None  # it changes inside the body: no test outside can decide it
        test = vectorizer.expr(condition, scope)
        return test if lanes_of(test) > 1 and _one_run(test) else None

    fast = body
    if isinstance(body, IfThenElse) and body.else_body is None:
        test = lane_test(body.condition)
        if test is not None:
            tests.append(test)
            fast = body.then_body

    def taken(node: Expr) -> Expr | None:
        if isinstance(node, Select) and (test := lane_test(node.condition)) is not None:
            tests.append(test)
            return map_expr(node.true_value, taken)
        return None

    fast = _map_exprs(fast, lambda e: map_expr(e, taken))
    if not tests:
        raise _CannotVectorize("no test of the lane to version the loop on")
    whole = [Binary(BinaryOp.AND, lane_of(t, 0), lane_of(t, lanes - 1)) for t in tests]
    condition: Expr = whole[0]
    for more in whole[1:]:
        condition = Binary(BinaryOp.AND, condition, more)
    condition = simplify_expr(condition, bounds)
    if isinstance(condition, Const) and not condition.value:
        raise _CannotVectorize("no vector passes the tests of the lane")
    tail: Stmt = serial
    if all(t == tests[0] for t in tests):
        try:
            _check_no_cross_lane_dependence(body)
            tail = _TailVectorizer(lanes, tests[0]).stmt(body, scope)
        except _CannotVectorize:
            pass
    return IfThenElse(condition, _vectorize_loop(var, extent, fast, bounds), tail)


def _map_exprs(stmt: Stmt, fn: Callable[[Expr], Expr]) -> Stmt:
    """`stmt` with `fn` applied to each expression it holds (not to loop extents)."""
    match stmt:
        case Store(buffer, indices, value, predicate):
            mask = None if predicate is None else fn(predicate)
            return Store(buffer, tuple(fn(i) for i in indices), fn(value), mask)
        case For(var, extent, kind, body, unroll):
            return For(var, extent, kind, _map_exprs(body, fn), unroll)
        case Seq(stmts):
            return Seq(tuple(_map_exprs(s, fn) for s in stmts))
        case IfThenElse(condition, then_body, else_body):
            other = None if else_body is None else _map_exprs(else_body, fn)
            return IfThenElse(fn(condition), _map_exprs(then_body, fn), other)
        case LetStmt(var, value, body):
            return LetStmt(var, fn(value), _map_exprs(body, fn))
        case Allocate(buffer, body):
            return Allocate(buffer, _map_exprs(body, fn))
    return stmt


def _check_no_cross_lane_dependence(body: Stmt) -> None:
    """Each stored buffer must be stored at one index tuple and read only there, so lane
    `l` only touches what iteration `l` touched (vector order == serial order)."""
    stores: dict[Buffer, set[tuple[Expr, ...]]] = {}
    loads: list[Load] = []
    _collect_accesses(body, stores, loads)
    for buffer, index_tuples in stores.items():
        if len(index_tuples) > 1:
            raise _CannotVectorize(f"{buffer.name} is stored at different indices")
    for load in loads:
        stored = stores.get(load.buffer)
        if stored is not None and load.indices not in stored:
            raise _CannotVectorize(f"{load.buffer.name} is read where another lane writes")


def _collect_accesses(
    stmt: Stmt, stores: dict[Buffer, set[tuple[Expr, ...]]], loads: list[Load]
) -> None:
    def expr_loads(expr: Expr) -> None:
        loads.extend(node for node in walk(expr) if isinstance(node, Load))

    match stmt:
        case Store(buffer, indices, value):
            stores.setdefault(buffer, set()).add(indices)
            for index in indices:
                expr_loads(index)
            expr_loads(value)
        case For(_, extent, _, body):
            expr_loads(extent)
            _collect_accesses(body, stores, loads)
        case Seq(stmts):
            for s in stmts:
                _collect_accesses(s, stores, loads)
        case IfThenElse(condition, then_body, else_body):
            expr_loads(condition)
            _collect_accesses(then_body, stores, loads)
            if else_body is not None:
                _collect_accesses(else_body, stores, loads)
        case LetStmt(_, value, body):
            expr_loads(value)
            _collect_accesses(body, stores, loads)
        case Allocate(_, body):
            _collect_accesses(body, stores, loads)


@dataclass(frozen=True, slots=True)
class _Scope:
    """What is known inside the vectorized body: `vectors` maps variables that became
    vectors (the loop variable, lets of vector values) to their vector form; `bounds`
    holds integer ranges of variables, for the original (scalar) expressions."""

    vectors: Mapping[Var, Expr]
    bounds: Mapping[Var, Interval]

    def bind(self, var: Var, vector: Expr | None, known: Interval | None) -> _Scope:
        """Enter a binding of `var`, which shadows any outer one."""
        vectors = {v: e for v, e in self.vectors.items() if v != var}
        if vector is not None:
            vectors[var] = vector
        return _Scope(vectors, _bind(self.bounds, var, known))


class _LoopVectorizer:
    """Rewrites the body of one VECTORIZED loop of `lanes` lanes."""

    def __init__(self, lanes: int) -> None:
        self.lanes = lanes

    def stmt(self, stmt: Stmt, scope: _Scope) -> Stmt:
        match stmt:
            case Store(buffer, indices, value):
                return self._store(buffer, indices, value, scope)
            case Seq(stmts):
                return Seq(tuple(self.stmt(s, scope) for s in stmts))
            case For(var, extent, kind, body, unroll):
                if kind is ForKind.PARALLEL or lanes_of(self.expr(extent, scope)) > 1:
                    raise _CannotVectorize("an inner loop depends on the lane or is parallel")
                inner = scope.bind(var, None, _loop_bound(extent))
                return For(var, extent, kind, self.stmt(body, inner), unroll)
            case IfThenElse(condition, then_body, else_body):
                test = self.expr(condition, scope)
                if lanes_of(test) > 1:
                    return self._predicated(test, then_body, else_body, scope)
                else_new = None if else_body is None else self.stmt(else_body, scope)
                return IfThenElse(test, self.stmt(then_body, scope), else_new)
            case LetStmt(var, value, body):
                return self._let(var, value, body, scope)
        raise _CannotVectorize(f"{type(stmt).__name__} inside a vectorized loop")

    def _store(
        self, buffer: Buffer, indices: tuple[Expr, ...], value: Expr, scope: _Scope
    ) -> Store:
        new_indices = tuple(self.expr(i, scope) for i in indices)
        if all(lanes_of(i) == 1 for i in new_indices):
            raise _CannotVectorize(f"the store to {buffer.name} is the same in every lane")
        if not isinstance(flatten_index(buffer, new_indices), Ramp):
            raise _CannotVectorize(f"the store index of {buffer.name} is not affine")
        return Store(buffer, new_indices, broadcast_to(self.expr(value, scope), self.lanes))

    def _predicated(
        self, test: Expr, then_body: Stmt, else_body: Stmt | None, scope: _Scope
    ) -> Stmt:
        """A contiguous store under an affine test of the lane (the tail of a row that
        whole vectors overrun) as a predicated store; any other lane-dependent if
        cannot be vectorized."""
        if else_body is not None or not isinstance(then_body, Store) or not _one_run(test):
            raise _CannotVectorize("an if condition depends on the lane")
        self._check_guarded_value(then_body.value, scope)
        store = self._store(then_body.buffer, then_body.indices, then_body.value, scope)
        flat = flatten_index(store.buffer, store.indices)
        if not (isinstance(flat, Ramp) and flat.stride == 1) or then_body.predicate is not None:
            raise _CannotVectorize(f"a guarded store to {store.buffer.name} is not contiguous")
        return Store(store.buffer, store.indices, store.value, test)

    def _check_guarded_value(self, value: Expr, scope: _Scope) -> None:
        """Raise unless the value a lane test guards can be evaluated in every lane."""
        _check_speculatable(value, scope.bounds)

    def _let(self, var: Var, value: Expr, body: Stmt, scope: _Scope) -> Stmt:
        known = const_interval(value, scope.bounds)
        new_value = self.expr(value, scope)
        if lanes_of(new_value) == 1:
            return LetStmt(var, new_value, self.stmt(body, scope.bind(var, None, known)))
        if isinstance(new_value, Ramp):
            # Bind the scalar base; uses see an affine Ramp, so their loads stay contiguous.
            ramp = Ramp(var, new_value.stride, new_value.lanes)
            return LetStmt(var, new_value.base, self.stmt(body, scope.bind(var, ramp, known)))
        vector_var = Var(var.name, new_value.dtype)
        return LetStmt(vector_var, new_value, self.stmt(body, scope.bind(var, vector_var, known)))

    def expr(self, expr: Expr, scope: _Scope) -> Expr:
        match expr:
            case Var():
                return scope.vectors.get(expr, expr)
            case Const():
                return expr
            case Load(buffer, indices):
                return Load(buffer, tuple(self.expr(i, scope) for i in indices))
            case Binary(op, a, b):
                return self._binary(op, a, b, scope)
            case Unary(op, a):
                operand = self.expr(a, scope)
                if op is UnaryOp.NEG and _is_int(operand):
                    return negate(operand)
                return Unary(op, operand)
            case Select(condition, true_value, false_value):
                return self._select(condition, true_value, false_value, scope)
            case Cast(dtype, value):
                operand = self.expr(value, scope)
                return Cast(vector_dtype(dtype, lanes_of(operand)), operand)
            case Call(name, args):
                new_args = tuple(self.expr(a, scope) for a in args)
                lanes = max(lanes_of(a) for a in new_args)
                return Call(name, tuple(broadcast_to(a, lanes) for a in new_args))
        raise _CannotVectorize(f"cannot vectorize {type(expr).__name__}")

    def _binary(self, op: BinaryOp, a: Expr, b: Expr, scope: _Scope) -> Expr:
        va, vb = self.expr(a, scope), self.expr(b, scope)
        if lanes_of(va) == 1 and lanes_of(vb) == 1:
            return Binary(op, va, vb)
        if op.is_logical:
            # Vector && and || evaluate their right side in every lane.
            _check_speculatable(b, scope.bounds)
        if _is_int(va) and op in _AFFINE:
            return _AFFINE[op](va, vb)
        if op in (BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD):
            blocked = _aligned_division(op, va, vb)
            if blocked is not None:
                return blocked
        return _vector_binary(op, va, vb)

    def _select(self, condition: Expr, true_value: Expr, false_value: Expr, scope: _Scope) -> Expr:
        test = self.expr(condition, scope)
        if lanes_of(test) > 1:
            # No lane may skip a branch any more: both must be safe to evaluate.
            _check_speculatable(true_value, scope.bounds)
            _check_speculatable(false_value, scope.bounds)
        if_true, if_false = self.expr(true_value, scope), self.expr(false_value, scope)
        return _vector_select(test, if_true, if_false)


class _TailVectorizer(_LoopVectorizer):
    """The tail vector of a versioned loop (a row's last, partial vector) as vector
    code under `test`, the lanes that exist: what the test guards (a store inside an
    if on it, the taken branch of a select on it) reads through loads predicated on
    it where they could fault, and the store is predicated. Everything else must be
    safe in every lane as it stands. The tail used to run serially, with a libm call
    per element for exp and the like (softmax over rows of 21 on Zen 4: ~7% faster
    now; over rows of 197, within noise)."""

    def __init__(self, lanes: int, test: Expr) -> None:
        super().__init__(lanes)
        self.test = test
        self.guarded = False

    @contextmanager
    def _guarded(self) -> Iterator[None]:
        """Inside: what the test guards, whose loads may be predicated on it."""
        self.guarded, outer = True, self.guarded
        try:
            yield
        finally:
            self.guarded = outer

    def _predicated(
        self, test: Expr, then_body: Stmt, else_body: Stmt | None, scope: _Scope
    ) -> Stmt:
        if test != self.test:
            raise _CannotVectorize("an if condition depends on the lane")
        with self._guarded():
            return super()._predicated(test, then_body, else_body, scope)

    def _check_guarded_value(self, value: Expr, scope: _Scope) -> None:
        pass  # its loads that could fault are predicated (`expr`)

    def expr(self, expr: Expr, scope: _Scope) -> Expr:
        if isinstance(expr, Load) and not _in_bounds(expr, scope.bounds):
            vector = super().expr(expr, scope) if self.guarded else None
            if not isinstance(vector, Load) or lanes_of(vector) == 1:
                # Unguarded, or one element for every lane, which no predicate keeps
                # from being read.
                raise _CannotVectorize(f"the tail may read {expr.buffer.name} out of bounds")
            return Load(vector.buffer, vector.indices, self.test)
        return super().expr(expr, scope)

    def _select(self, condition: Expr, true_value: Expr, false_value: Expr, scope: _Scope) -> Expr:
        test = self.expr(condition, scope)
        if test != self.test:
            return super()._select(condition, true_value, false_value, scope)
        _check_speculatable(false_value, scope.bounds)
        with self._guarded():
            if_true = self.expr(true_value, scope)
        return _vector_select(test, if_true, self.expr(false_value, scope))


def _vector_select(test: Expr, if_true: Expr, if_false: Expr) -> Select:
    """`test ? if_true : if_false` with every operand as wide as the widest."""
    lanes = max(lanes_of(test), lanes_of(if_true), lanes_of(if_false))
    return Select(test, broadcast_to(if_true, lanes), broadcast_to(if_false, lanes))


_AFFINE = {BinaryOp.ADD: add, BinaryOp.SUB: subtract, BinaryOp.MUL: multiply}


def _aligned_division(op: BinaryOp, a: Expr, b: Expr) -> Expr | None:
    """`ramp // d` and `ramp % d` for a contiguous ramp that starts at a multiple of
    its lanes, with `d` a multiple of the lanes: the lanes never straddle a multiple
    of `d`, so the quotient is the same in every lane (a broadcast) and the remainder
    a ramp (a grouped conv's channel group and channel within it)."""
    divisor = _int_const(b.value) if isinstance(b, Broadcast) else _int_const(b)
    if not isinstance(a, Ramp) or a.stride != 1 or divisor is None or divisor <= 0:
        return None
    if divisor % a.lanes or not _multiple_of(a.base, a.lanes):
        return None
    base = Binary(op, a.base, Const(divisor, a.base.dtype))
    return Broadcast(base, a.lanes) if op is BinaryOp.FLOOR_DIV else Ramp(base, 1, a.lanes)


def _multiple_of(expr: Expr, factor: int) -> bool:
    """Whether integer `expr` is a multiple of `factor` for every value of its
    variables (checked on its structure: sums and products of multiples)."""
    match expr:
        case Const(value) if not isinstance(value, (bool, float)):
            return int(value) % factor == 0
        case Binary(BinaryOp.MUL, x, y):
            return _multiple_of(x, factor) or _multiple_of(y, factor)
        case Binary(BinaryOp.ADD | BinaryOp.SUB, x, y):
            return _multiple_of(x, factor) and _multiple_of(y, factor)
    return False


def _one_run(test: Expr) -> bool:
    """Whether the lanes where vector `test` holds form one contiguous run: it is a
    conjunction of orderings between lane-affine integers (Ramps, broadcast scalars),
    each of which holds on a prefix or a suffix of the lanes."""
    match test:
        case Binary(BinaryOp.AND, a, b):
            return _one_run(a) and _one_run(b)
        case Binary(op, a, b) if op in _ORDERINGS:
            return all(isinstance(side, (Ramp, Broadcast)) or lanes_of(side) == 1
                       for side in (a, b)) and _is_int(a)  # fmt: skip
    return False


_ORDERINGS = frozenset({BinaryOp.LT, BinaryOp.LE, BinaryOp.GT, BinaryOp.GE})


def lane_of(expr: Expr, lane: int) -> Expr:
    """The scalar that lane `lane` of a vector of Ramps, Broadcasts, scalars and their
    arithmetic and comparisons holds (for the lanes of a store's predicate)."""
    match expr:
        case Ramp(base, stride, _):
            return base + Const(stride * lane, base.dtype) if stride * lane else base
        case Broadcast(value, _):
            return value
        case Binary(op, a, b) if lanes_of(expr) > 1:
            return Binary(op, lane_of(a, lane), lane_of(b, lane))
    if lanes_of(expr) > 1:
        raise ValueError(f"no lane of {type(expr).__name__} can be taken apart")
    return expr


def _is_int(expr: Expr) -> bool:
    return split_dtype(expr.dtype)[0].startswith(("int", "uint"))


def _check_speculatable(expr: Expr, bounds: Mapping[Var, Interval]) -> None:
    """Raise unless evaluating `expr` (an original, scalar expression) in every lane
    cannot fault."""
    for node in walk(expr):
        if isinstance(node, Load) and not _in_bounds(node, bounds):
            raise _CannotVectorize(f"a lazy branch may read {node.buffer.name} out of bounds")
        if (
            isinstance(node, Binary)
            and node.op in (BinaryOp.DIV, BinaryOp.FLOOR_DIV, BinaryOp.FLOOR_MOD)
            and _is_int(node)
            and not _int_const(node.b)
        ):
            raise _CannotVectorize("a lazy branch divides integers by a variable")


# -- bounds, to prove speculative loads safe -----------------------------------------


def _in_bounds(load: Load, bounds: Mapping[Var, Interval]) -> bool:
    for index, extent in zip(load.indices, load.buffer.shape, strict=True):
        known = const_interval(index, bounds)
        if known.lo is None or known.hi is None or known.lo < 0 or known.hi >= extent:
            return False
    return True
