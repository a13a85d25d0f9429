"""The op registry: for every graph op, its attributes, type inference and NumPy reference.

Each op is declared once with `register_op`. The reference implementation is the
correctness oracle for everything downstream (the interpreter runs it; constant
folding evaluates it), so it favours clarity and exactness over speed.
"""

from __future__ import annotations

import enum
import math
import re
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ember.errors import GraphError, ResourceError
from ember.graph.ir import Attrs, NoAttrs, Node, TensorType


class OpPattern(enum.IntEnum):
    """How an op may be fused (ordered: a smaller pattern fuses into a larger one).

    ELEMWISE: output[i] depends on input[i] only, same shape.
    BROADCAST: elementwise with numpy broadcasting of inputs.
    INJECTIVE: each output element reads a few input elements (reshape, transpose...).
    REDUCTION: reduces axes (sum, mean, max, argmax, ...).
    ANCHOR: the heavy op of a fused group whose epilogue can be fused after it
        (conv, dense, matmul, pool, softmax, norms).
    OPAQUE: never fused with anything (topk, ...).
    """

    ELEMWISE = 0
    BROADCAST = 1
    INJECTIVE = 2
    REDUCTION = 3
    ANCHOR = 4
    OPAQUE = 5


# Signatures are loose in the attrs argument (each op has its own Attrs subclass); the
# registry checks at call time that a node carries the attrs type its op declares.
InferFn = Callable[[Sequence[TensorType], Any], tuple[TensorType, ...]]
ReferenceFn = Callable[[Sequence[np.ndarray], Any], tuple[np.ndarray, ...]]
MacsFn = Callable[[Sequence[TensorType], Sequence[TensorType], Any], int]


def elementwise_macs(
    inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: Any
) -> int:
    """Default cost: one operation per output element."""
    return sum(out.size for out in outputs)


def no_macs(inputs: Sequence[TensorType], outputs: Sequence[TensorType], attrs: Any) -> int:
    """Data movement only (reshape, transpose, concat...)."""
    return 0


@dataclass(frozen=True, slots=True)
class OpDef:
    """Everything Ember knows about one graph op."""

    name: str
    pattern: OpPattern
    infer: InferFn
    reference: ReferenceFn
    attrs_type: type[Attrs] = NoAttrs
    # Accepted input counts, inclusive; max None means variadic.
    min_inputs: int = 1
    max_inputs: int | None = 1
    # Multiply-accumulates (for conv/dense/matmul) or operations (everything else);
    # `ember info` reports FLOPs as 2 * MACs for the former, ops for the latter.
    macs: MacsFn = elementwise_macs
    # True for ops whose cost is multiply-accumulates (conv, dense, matmul...).
    counts_macs: bool = False
    doc: str = ""

    def check_arity(self, count: int) -> None:
        upper = self.max_inputs if self.max_inputs is not None else count
        if not self.min_inputs <= count <= upper:
            expected = (
                f"{self.min_inputs}"
                if self.min_inputs == self.max_inputs
                else f"{self.min_inputs}..{self.max_inputs if self.max_inputs is not None else 'n'}"
            )
            raise GraphError(f"op {self.name!r} takes {expected} inputs, got {count}")


_REGISTRY: dict[str, OpDef] = {}


def register_op(opdef: OpDef) -> OpDef:
    """Add an op to the registry; each name once."""
    if opdef.name in _REGISTRY:
        raise ValueError(f"op {opdef.name!r} is registered twice")
    _REGISTRY[opdef.name] = opdef
    return opdef


def get_op(name: str) -> OpDef:
    try:
        return _REGISTRY[name]
    except KeyError:
        raise GraphError(f"unknown graph op {name!r}") from None


def all_ops() -> dict[str, OpDef]:
    return dict(_REGISTRY)


def infer_types(op: str, inputs: Sequence[TensorType], attrs: Attrs) -> tuple[TensorType, ...]:
    """Output types of `op` applied to `inputs` with `attrs`, checking arity and attrs."""
    opdef = get_op(op)
    opdef.check_arity(len(inputs))
    if type(attrs) is not opdef.attrs_type:
        raise GraphError(
            f"op {op!r} needs attrs of type {opdef.attrs_type.__name__}, got {type(attrs).__name__}"
        )
    return opdef.infer(inputs, attrs)


_NUMPY_MAX_BYTES = 2**63 - 1
_TOO_BIG = re.compile(r"too big|too large|maximum (supported|allowed) dimension", re.IGNORECASE)


def evaluate(op: str, inputs: Sequence[np.ndarray], attrs: Attrs) -> tuple[np.ndarray, ...]:
    """Run the reference implementation; results are cast to the inferred dtypes."""
    opdef = get_op(op)
    expected = infer_types(op, [TensorType.of(np.asarray(a)) for a in inputs], attrs)
    for out_type in expected:
        # NumPy multiplies the non-zero dimensions even of an empty array, and refuses
        # past its index range, with a message its reshapes and tiles do not repeat.
        nonzero = math.prod(dim for dim in out_type.shape if dim)
        if nonzero * np.dtype(out_type.dtype).itemsize > _NUMPY_MAX_BYTES:
            raise ResourceError(
                f"{op}: its result {out_type} has more elements along its non-empty axes "
                f"({nonzero:,}) than NumPy can index, empty or not"
            )
    try:
        results = opdef.reference([np.asarray(a) for a in inputs], attrs)
    except (MemoryError, ValueError, OverflowError) as error:
        # NumPy refuses arrays whose byte size overflows before it allocates anything.
        if not isinstance(error, MemoryError) and not _TOO_BIG.search(str(error)):
            raise
        sizes = ", ".join(f"{t} ({t.nbytes:,} bytes)" for t in expected)
        raise ResourceError(
            f"{op}: computing its result {sizes} does not fit in this machine's memory"
        ) from None
    if len(results) != len(expected):
        raise GraphError(f"reference of {op!r} returned {len(results)} outputs")
    checked = []
    for result, out_type in zip(results, expected, strict=True):
        array = np.asarray(result).astype(out_type.dtype, copy=False)
        if array.shape != out_type.shape:
            raise GraphError(
                f"reference of {op!r} produced shape {array.shape}, "
                f"type inference said {out_type.shape}"
            )
        checked.append(array)
    return tuple(checked)


def node_macs(node: Node) -> int:
    opdef = get_op(node.op)
    return opdef.macs([v.type for v in node.inputs], [v.type for v in node.outputs], node.attrs)
