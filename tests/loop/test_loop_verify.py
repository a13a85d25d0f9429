"""`verify` on loop IR: each kind of malformed kernel is rejected with a message that
names what is wrong."""

import pytest

from ember.errors import LoopIRError
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
from ember.loop.verify import verify
from ember.te.expr import Cast, Const, Var, select

I, J = Var("i"), Var("j")
A = Buffer("A", (4, 8), "float32")
B = Buffer("B", (4, 8), "float32")


def loop(var, extent, body, kind=ForKind.SERIAL):
    return For(var, Const(extent), kind, body)


def kernel(body, *args):
    return PrimFunc("k", args or (A, B), body)


def copy_body(value=None, indices=(I, J)):
    return loop(
        I, 4, loop(J, 8, Store(B, indices, value if value is not None else Load(A, (I, J))))
    )


def rejects(body, message, *args):
    with pytest.raises(LoopIRError, match=message):
        verify(kernel(body, *args))


def test_well_formed_kernels_pass():
    verify(kernel(copy_body()))
    tmp = Buffer("T", (8,), "float32", "local")
    vector = Store(
        B, (Broadcast(I, 8), Ramp(Const(0), 1, 8)), Load(A, (Broadcast(I, 8), Ramp(Const(0), 1, 8)))
    )
    let = LetStmt(
        Var("n", "int64"), I * 2, IfThenElse(I < 2, Store(tmp, (I,), Const(0.0, "float32")))
    )
    verify(kernel(loop(I, 4, seq(vector, Allocate(tmp, let)), ForKind.PARALLEL)))


def test_variable_outside_its_loop():
    body = seq(
        loop(I, 4, Store(B, (I, Const(0)), Const(1.0, "float32"))),
        Store(B, (I, Const(1)), Const(1.0, "float32")),
    )
    rejects(body, "invalid loop IR in kernel 'k': variable 'i' is used outside the loop or let")


def test_variable_bound_twice():
    rejects(loop(I, 4, copy_body()), "variable 'i' is bound by a loop inside its own scope")


def test_buffer_not_in_scope():
    tmp = Buffer("T", (4, 8), "float32", "local")
    body = seq(
        Allocate(tmp, copy_body()), loop(I, 4, loop(J, 8, Store(B, (I, J), Load(tmp, (I, J)))))
    )
    rejects(body, "load from buffer 'T', which is neither an argument of the kernel nor allocated")
    rejects(copy_body(), "store to buffer 'B', which is neither an argument", A)


def test_wrong_index_count():
    rejects(
        copy_body(indices=(I,)),
        r"store to 'B' uses 1 indices but the buffer has 2 dimensions \[4, 8\]",
    )
    rejects(copy_body(Load(A, (I, J, J))), "load from 'A' uses 3 indices")


def test_store_dtype_mismatch():
    rejects(
        copy_body(Const(1, "int64")),
        r"store to 'B' \(float32, indices addressing 1 lanes\) writes a int64 value 1; "
        "it must be float32",
    )
    wide = Load(A, (Broadcast(I, 8), Ramp(Const(0), 1, 8)))
    rejects(loop(I, 4, Store(B, (I, Const(0)), wide)), "writes a float32x8 value")


def test_ramp_lanes_disagree_with_vector_context():
    value = Load(A, (Broadcast(I, 8), Ramp(Const(0), 1, 8)))
    body = loop(I, 4, Store(B, (Broadcast(I, 4), Ramp(Const(0), 1, 4)), value))
    rejects(body, "store to 'B' has 4-lane indices but a 8-lane value")
    mixed = Load(A, (Broadcast(I, 4), Ramp(Const(0), 1, 8)))
    rejects(loop(I, 4, Store(B, (I, Const(0)), mixed)), r"mixes vector indices of \[4, 8\] lanes")
    sum_of_widths = Load(A, (Broadcast(I, 8), Ramp(Const(0), 1, 8))) + Broadcast(
        Const(1.0, "float32"), 4
    )
    rejects(
        loop(I, 4, Store(B, (Broadcast(I, 8), Ramp(Const(0), 1, 8)), sum_of_widths)),
        r"have \[4, 8\] lanes",
    )


def test_operand_dtypes_and_conditions():
    rejects(
        copy_body(Load(A, (I, J)) + Cast("float64", Load(A, (I, J)))),
        "have dtypes float32 and float64",
    )
    rejects(
        loop(I, 4, IfThenElse(I, Store(B, (I, Const(0)), Const(0.0, "float32")))),
        "if condition i has dtype int64, not bool",
    )
    rejects(copy_body(select(I < 2, Const(1.0, "float32"), Const(1.0, "float64"))), "branches of")
    rejects(copy_body(Load(A, (Cast("float32", I), J))), "indices must be integers")


def test_nested_parallel_loops():
    body = loop(
        I, 4, loop(J, 8, Store(B, (I, J), Load(A, (I, J))), ForKind.PARALLEL), ForKind.PARALLEL
    )
    rejects(
        body, "parallel loop 'j' is nested inside parallel loop 'i'; fuse them or make one serial"
    )
    verify(
        kernel(
            seq(
                loop(I, 4, Store(B, (I, Const(0)), Const(0.0, "float32")), ForKind.PARALLEL),
                loop(I, 4, Store(B, (I, Const(1)), Const(0.0, "float32")), ForKind.PARALLEL),
            )
        )
    )


def test_let_dtype_and_tensor_expressions():
    n = Var("n", "float32")
    rejects(
        loop(I, 4, LetStmt(n, I, Store(B, (I, Const(0)), n))),
        "let n: float32 is bound to a int64 value",
    )
    with pytest.raises(LoopIRError, match="lists a buffer twice"):
        verify(PrimFunc("k", (A, A), copy_body()))


def test_vector_comparison_store_into_bool_buffer_passes():
    mask_buf = Buffer("M", (4, 8), "bool")
    lanes = (Broadcast(I, 8), Ramp(Const(0), 1, 8))
    mask = Load(A, lanes) < Broadcast(Const(0.0, "float32"), 8)
    verify(kernel(loop(I, 4, Store(mask_buf, lanes, mask)), A, mask_buf))
    narrow = (Broadcast(I, 4), Ramp(Const(0), 1, 4))
    rejects(
        loop(I, 4, Store(mask_buf, narrow, mask)),
        "has 4-lane indices but a 8-lane value",
        A,
        mask_buf,
    )
