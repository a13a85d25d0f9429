"""The table of ONNX op converters and what a converter sees.

A converter turns one ONNX node into graph ops through the builder and returns one
Ember value per ONNX output (`None` for an optional output nobody reads). Constant
inputs (initializers, `Constant` nodes, folded shape subgraphs) are visible through
`ctx.constant(value)`, which is how attribute-like inputs (Reshape's shape, Split's
sizes, Clip's bounds in newer opsets) are read.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np
import onnx

from ember.errors import ModelLoadError, UnsupportedOperatorError
from ember.graph.builder import GraphBuilder
from ember.graph.ir import DTYPES, Value

_MISSING = object()


@dataclass
class OnnxNode:
    """One ONNX node with inputs resolved to Ember values and attributes decoded
    (ints, floats, str, lists of them, tensors as NumPy arrays)."""

    op_type: str
    name: str
    inputs: list[Value | None]
    attrs: dict[str, object] = field(default_factory=dict)
    num_outputs: int = 1
    domain: str = ""

    @property
    def where(self) -> str:
        """How error messages name this node: `node 'conv1' (Conv)`."""
        return f"node {self.name!r} ({self.op_type})"

    def attr(self, name: str, default: object = _MISSING) -> object:
        if name in self.attrs:
            return self.attrs[name]
        if default is _MISSING:
            raise ModelLoadError(f"{self.where} lacks required attribute {name!r}")
        return default

    def int_attr(self, name: str, default: int | None = None) -> int:
        """An int attribute (required when `default` is None)."""
        value = self.attr(name) if default is None else self.attr(name, default)
        if not isinstance(value, int | np.integer):
            raise ModelLoadError(f"{self.where}: attribute {name!r} must be an int, got {value!r}")
        return int(value)

    def flag_attr(self, name: str, default: bool) -> bool:
        """A boolean attribute: ONNX writes it as an int, 0 or 1; anything else is
        refused rather than read as true."""
        value = self.int_attr(name, int(default))
        if value not in (0, 1):
            raise ModelLoadError(
                f"{self.where}: attribute {name!r} is {value}; it is a flag and must be 0 or 1"
            )
        return bool(value)

    def float_attr(self, name: str, default: float, infinite: bool = False) -> float:
        """A float attribute: a number, never NaN, and finite unless `infinite` (a
        bound such as Clip's). An alpha or epsilon of inf or NaN is no model's intent,
        and implementations disagree on what it computes."""
        value = self.attr(name, default)
        if not isinstance(value, float | int | np.floating | np.integer):
            raise ModelLoadError(
                f"{self.where}: attribute {name!r} must be a number, got {value!r}"
            )
        if math.isnan(value) or (math.isinf(value) and not infinite):
            kind = "a number" if infinite else "a finite number"
            raise ModelLoadError(f"{self.where}: attribute {name!r} is {value}; it must be {kind}")
        return float(value)

    def input(self, index: int) -> Value:
        """A required input."""
        value = self.inputs[index] if index < len(self.inputs) else None
        if value is None:
            raise ModelLoadError(f"{self.where} lacks required input #{index}")
        return value

    def optional_input(self, index: int) -> Value | None:
        return self.inputs[index] if index < len(self.inputs) else None


@dataclass
class ConversionContext:
    builder: GraphBuilder
    opset: int

    def constant(self, value: Value | None) -> np.ndarray | None:
        """The array behind a constant value; None if computed at run time or absent."""
        return None if value is None else self.builder.constant_value(value)

    def require_constant(self, node: OnnxNode, index: int, what: str) -> np.ndarray:
        """A constant input, or an error naming the node: Ember needs static shapes."""
        array = self.constant(node.input(index))
        if array is None:
            raise UnsupportedOperatorError(
                f"{node.where}: input #{index} ({what}) must be a "
                "constant or computable from static shapes; Ember compiles static graphs"
            )
        return array


def dtype_from_onnx(elem_type: int, where: str) -> str:
    """The Ember dtype of an ONNX element type (`TensorProto.FLOAT` -> "float32").

    `where` names what carries the type (an input, a node attribute) for the error."""
    try:
        name = str(np.dtype(onnx.helper.tensor_dtype_to_np_dtype(elem_type)))
    except (KeyError, TypeError, ValueError):
        name = ""
    if name not in DTYPES:
        onnx_name = (
            onnx.TensorProto.DataType.Name(elem_type)
            if elem_type in onnx.TensorProto.DataType.values()
            else f"#{elem_type}"
        )
        raise UnsupportedOperatorError(
            f"{where} has element type {onnx_name}, which Ember does not support; "
            f"supported types: {', '.join(DTYPES)}. Convert the model to one of them "
            "(e.g. float32) before importing it"
        )
    return name


def single_value(node: OnnxNode, array: np.ndarray, what: str) -> np.ndarray:
    """`array` as a 0-d array, checking that it holds exactly one value (ONNX scalars
    are rank 0, but exporters also write them as one-element vectors)."""
    if array.size != 1:
        raise ModelLoadError(
            f"{node.where}: {what} must be a single value, got an array of shape "
            f"{list(array.shape)}"
        )
    return array.reshape(())


def int_list(value: object) -> list[int]:
    """An ints attribute or a constant array as a list of Python ints; a float array
    must hold whole numbers (the node's converter names the node)."""
    array = np.asarray(value).reshape(-1)
    if array.dtype.kind == "f" and not np.all(np.isfinite(array) & (array == np.round(array))):
        raise ModelLoadError(f"expected integers, got {array.tolist()}")
    if array.dtype.kind not in "biuf":
        raise ModelLoadError(f"expected integers, got {array.dtype} values")
    return [int(v) for v in array]


Converter = Callable[[ConversionContext, OnnxNode], Sequence[Value | None]]

CONVERTERS: dict[str, Converter] = {}


# Operators outside the default domain that Ember converts (ONNX Runtime's quantized
# operators) are keyed "domain.OpType".
MICROSOFT_DOMAIN = "com.microsoft"


def converter_key(domain: str, op_type: str) -> str:
    """How the table names an operator: the op type in the default domain ("" or
    "ai.onnx"), else "domain.OpType"."""
    return op_type if domain in ("", "ai.onnx") else f"{domain}.{op_type}"


def converter(*op_types: str, domain: str = "") -> Callable[[Converter], Converter]:
    """Register a function as the converter for the given ONNX op types of `domain`."""

    def register(fn: Converter) -> Converter:
        for op_type in op_types:
            key = converter_key(domain, op_type)
            if key in CONVERTERS:
                raise ValueError(f"ONNX op {key!r} has two converters")
            CONVERTERS[key] = fn
        return fn

    return register
