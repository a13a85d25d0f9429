"""Graph op name -> compute declaration, and the ops that no compute can express.

`declare("conv", [data, weight], attrs, output_types)` returns the op's output
tensors, built from the given input tensors (placeholders or earlier stages). Every op
of the graph registry has either a declaration here or an entry in NOT_EXPRESSIBLE
saying why it stays on the reference path (a test keeps that true).
"""

from __future__ import annotations

from collections.abc import Sequence

from ember.errors import UnsupportedOperatorError
from ember.graph.ir import Attrs, TensorType
from ember.graph.ops import infer_types
from ember.te import Tensor
from ember.topi import (
    broadcast,
    conv,
    elementwise,
    injective,
    linalg,
    norm,
    pool,
    quantized,
    reduce,
    resize,
    sparse,
    winograd,
)
from ember.topi.common import Declaration


class NotExpressibleError(UnsupportedOperatorError):
    """The op has no compute declaration (its result is not a fixed expression per
    output element); code generation keeps it on the reference path."""


# Ops whose output elements are not each a fixed expression of the inputs.
NOT_EXPRESSIBLE: dict[str, str] = {
    "topk": (
        "topk sorts along an axis: which input lands at an output position depends on "
        "every other element, which no per-element expression or single reduction gives"
    ),
}

DECLARATIONS: dict[str, Declaration] = {
    **elementwise.DECLARATIONS,
    **broadcast.DECLARATIONS,
    **injective.DECLARATIONS,
    **conv.DECLARATIONS,
    **quantized.DECLARATIONS,
    **linalg.DECLARATIONS,
    **sparse.DECLARATIONS,
    **pool.DECLARATIONS,
    **norm.DECLARATIONS,
    **reduce.DECLARATIONS,
    **resize.DECLARATIONS,
    **winograd.DECLARATIONS,
}


def has_declaration(op_name: str) -> bool:
    return op_name in DECLARATIONS


def declare(
    op_name: str,
    inputs: Sequence[Tensor],
    attrs: Attrs,
    output_types: Sequence[TensorType] | None = None,
) -> list[Tensor]:
    """The tensors computing graph op `op_name` on `inputs` (one per op output).

    `output_types` are the node's inferred output types; when None they are inferred
    from the inputs' shapes and dtypes."""
    if op_name in NOT_EXPRESSIBLE:
        raise NotExpressibleError(
            f"graph op {op_name!r} cannot be a compute declaration: "
            f"{NOT_EXPRESSIBLE[op_name]}; run it with the reference implementation instead"
        )
    declaration = DECLARATIONS.get(op_name)
    if declaration is None:
        raise UnsupportedOperatorError(
            f"graph op {op_name!r} has no compute declaration yet; add one to "
            "ember/topi (or list it in NOT_EXPRESSIBLE) to compile it"
        )
    if output_types is None:
        output_types = infer_types(op_name, [TensorType(t.shape, t.dtype) for t in inputs], attrs)
    outputs = declaration(inputs, attrs, output_types)
    for tensor, expected in zip(outputs, output_types, strict=True):
        if tensor.shape != expected.shape or tensor.dtype != expected.dtype:
            raise AssertionError(
                f"declaration of {op_name} made {tensor.dtype}{list(tensor.shape)}, the "
                f"graph infers {expected}"
            )
    return outputs
