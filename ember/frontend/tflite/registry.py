"""The table of TFLite builtin-operator converters and what a converter sees.

A converter turns one operator of the main subgraph into graph ops through the
builder and returns one Ember value per operator output. Inputs arrive as Ember values
(`None` for an omitted optional input, index -1); constant tensors are params, and
their arrays are visible through `node.constant(i)`, which is how shapes, axes and
paddings are read. Options are the schema's option table, read by field name
(`node.option("StrideW")`). Each output's declared shape and dtype are in
`node.output_types`; the loader checks the converted values against them.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from ember.errors import ModelLoadError, UnsupportedOperatorError
from ember.graph.builder import GraphBuilder
from ember.graph.ir import NoAttrs, TensorType, Value
from ember.graph.ops.attrs import ClipAttrs, ReshapeAttrs

_MISSING = object()


@dataclass
class TFLiteNode:
    """One operator: its builtin name, position, resolved inputs, options table."""

    op: str
    index: int
    inputs: list[Value | None]
    output_types: list[TensorType]
    options: object | None
    builder: GraphBuilder
    # Per input and output: (scales, zero points, quantized dimension) of a quantized
    # tensor, else None.
    quantization: list[tuple[np.ndarray, np.ndarray, int] | None]
    output_quantization: list[tuple[np.ndarray, np.ndarray, int] | None]

    @property
    def name(self) -> str:
        return f"{self.op.lower()}_{self.index}"

    @property
    def where(self) -> str:
        """How error messages name this operator: `operator #3 (CONV_2D)`."""
        return f"operator #{self.index} ({self.op})"

    def input(self, index: int) -> Value:
        value = self.inputs[index] if index < len(self.inputs) else None
        if value is None:
            raise ModelLoadError(f"{self.where} lacks its input #{index}")
        return value

    def optional_input(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None

    def constant(self, index: int, what: str) -> np.ndarray:
        """The data of constant input `index` (a shape, axes, paddings...)."""
        array = self.builder.constant_value(self.input(index))
        if array is None:
            raise UnsupportedOperatorError(
                f"{self.where}: input #{index} ({what}) must be a constant; Ember compiles "
                "static graphs"
            )
        return array

    def option(self, field: str, default: object = _MISSING) -> object:
        """Option `field` by its schema name (`StrideW`), else `default`."""
        getter = getattr(self.options, field, None)
        if getter is None:
            if default is _MISSING:
                raise ModelLoadError(f"{self.where} lacks its option {field!r}")
            return default
        return getter()

    @property
    def output_shape(self) -> tuple[int, ...]:
        return self.output_types[0].shape

    # -- building -------------------------------------------------------------------

    def add(self, op: str, inputs: list[Value], attrs: object = None, suffix: str = "") -> Value:
        name = f"{self.name}_{suffix}" if suffix else self.name
        return self.builder.add(op, inputs, attrs if attrs is not None else NoAttrs(), name)  # type: ignore[arg-type]

    def reshape(self, value: Value, shape: Sequence[int], suffix: str = "") -> Value:
        if tuple(value.shape) == tuple(shape):
            return value
        return self.add("reshape", [value], ReshapeAttrs(tuple(int(d) for d in shape)), suffix)

    def scalar(self, number: float, dtype: str = "float32") -> Value:
        return self.builder.constant(np.asarray(number, dtype=dtype))

    def activation(self, value: Value, field: str = "FusedActivationFunction") -> Value:
        """Apply the operator's fused activation (schema ActivationFunctionType)."""
        kind = int(self.option(field, 0))  # type: ignore[call-overload]
        if kind == 0:  # NONE
            return value
        if kind == 1:
            return self.add("relu", [value], suffix="relu")
        if kind in (2, 3):  # RELU_N1_TO_1, RELU6
            low, high = (-1.0, 1.0) if kind == 2 else (0.0, 6.0)
            return self.add("clip", [value], ClipAttrs(low, high), "clip")
        if kind == 4:
            return self.add("tanh", [value], suffix="tanh")
        raise UnsupportedOperatorError(f"{self.where}: fused activation #{kind} (SIGN_BIT)")


Converter = Callable[[TFLiteNode], Sequence[Value]]

CONVERTERS: dict[str, Converter] = {}


def converter(*ops: str) -> Callable[[Converter], Converter]:
    """Register a function as the converter of the given builtin operators."""

    def register(function: Converter) -> Converter:
        for op in ops:
            if op in CONVERTERS:
                raise ValueError(f"two converters for {op}")
            CONVERTERS[op] = function
        return function

    return register


def unsupported(node: TFLiteNode, what: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(f"{node.where}: {what}")
