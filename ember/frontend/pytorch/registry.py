"""The table of ATen op converters and what a converter sees.

`torch.export` gives an FX graph whose `call_function` nodes name ATen operator
overloads (`aten.convolution.default`); after `run_decompositions()` they are the core
ATen set. A converter turns one such node into graph ops through the builder and
returns its result: one Ember value, or a tuple for an overload with several outputs
(`None` for an output Ember does not compute; the loader reports it if it is read).

A node's arguments arrive as the overload's schema spells them, with every FX node
replaced by what it converted to: an Ember `Value`, a tuple of them, or a Python
number. Keyword arguments are merged in by name (`node.arg("alpha", 1)`).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from ember.errors import ModelLoadError, UnsupportedOperatorError
from ember.graph.builder import GraphBuilder
from ember.graph.ir import FLOAT_DTYPES, NoAttrs, Value
from ember.graph.ops.attrs import CastAttrs, ReshapeAttrs

_MISSING = object()

# torch's default float dtype: a Python float meeting an integer tensor makes float32.
DEFAULT_FLOAT = "float32"


@dataclass
class TorchNode:
    """One `call_function` node: its overload's name, FX node name, and arguments
    (positional as given; keyword ones by schema name in `kwargs`)."""

    target: str
    name: str
    args: tuple[object, ...]
    kwargs: dict[str, object] = field(default_factory=dict)

    @property
    def where(self) -> str:
        """How error messages name this node: `node 'conv2d' (aten.convolution.default)`."""
        return f"node {self.name!r} ({self.target})"

    def arg(self, index: int, name: str, default: object = _MISSING) -> object:
        """Argument `index` (or keyword `name`), else `default`; required without one."""
        if index < len(self.args):
            return self.args[index]
        if name in self.kwargs:
            return self.kwargs[name]
        if default is _MISSING:
            raise ModelLoadError(f"{self.where} lacks its argument {name!r}")
        return default

    def value(self, index: int, name: str = "input") -> Value:
        """A tensor argument."""
        value = self.arg(index, name)
        if not isinstance(value, Value):
            raise ModelLoadError(f"{self.where}: argument {name!r} must be a tensor, got {value!r}")
        return value

    def optional_value(self, index: int, name: str) -> Value | None:
        value = self.arg(index, name, None)
        if value is not None and not isinstance(value, Value):
            raise ModelLoadError(f"{self.where}: argument {name!r} must be a tensor, got {value!r}")
        return value

    def ints(self, index: int, name: str, default: object = _MISSING) -> list[int]:
        """An int[] argument (a single int counts as a list of one)."""
        value = self.arg(index, name, default)
        if isinstance(value, int | np.integer):
            return [int(value)]
        if not isinstance(value, list | tuple) or not all(
            isinstance(v, int | np.integer) for v in value
        ):
            raise ModelLoadError(
                f"{self.where}: argument {name!r} must be a list of static ints, got {value!r}"
            )
        return [int(v) for v in value]

    def int_(self, index: int, name: str, default: object = _MISSING) -> int:
        value = self.arg(index, name, default)
        if not isinstance(value, int | np.integer) or isinstance(value, bool):
            raise ModelLoadError(
                f"{self.where}: argument {name!r} must be a static int, got {value!r}"
            )
        return int(value)

    def float_(self, index: int, name: str, default: object = _MISSING) -> float:
        value = self.arg(index, name, default)
        if not isinstance(value, int | float | np.integer | np.floating):
            raise ModelLoadError(f"{self.where}: argument {name!r} must be a number, got {value!r}")
        return float(value)


@dataclass
class ConversionContext:
    builder: GraphBuilder

    def constant(self, value: Value | None) -> np.ndarray | None:
        """The array behind a constant value; None if computed at run time or absent."""
        return None if value is None else self.builder.constant_value(value)

    def add(self, op: str, inputs: list[Value], node: TorchNode, attrs: object = None,
            suffix: str = "") -> Value:  # fmt: skip
        """Apply `op`, naming the graph node after the FX node (plus `suffix`)."""
        name = f"{node.name}_{suffix}" if suffix else node.name
        return self.builder.add(op, inputs, attrs if attrs is not None else NoAttrs(), name)  # type: ignore[arg-type]

    def cast(self, value: Value, dtype: str, node: TorchNode) -> Value:
        if value.dtype == dtype:
            return value
        return self.add("cast", [value], node, CastAttrs(dtype), f"to_{dtype}")

    def reshape(self, value: Value, shape: Sequence[int], node: TorchNode, suffix: str) -> Value:
        if tuple(value.shape) == tuple(shape):
            return value
        return self.add(
            "reshape", [value], node, ReshapeAttrs(tuple(int(d) for d in shape)), suffix
        )

    def scalar(self, number: object, dtype: str) -> Value:
        """A Python number as a 0-d constant of `dtype`."""
        return self.builder.constant(np.asarray(number, dtype=dtype))

    def operands(self, node: TorchNode, a: object, b: object) -> tuple[Value, Value]:
        """Two operands of a binary op as tensors of one dtype, by torch's promotion
        rules as far as the ops Ember has need them: a Python number takes the tensor's
        dtype (a float meeting an integer tensor makes both float32); two tensors of
        different dtypes meet in the float one, or the wider integer."""
        if not isinstance(a, Value) and not isinstance(b, Value):
            raise ModelLoadError(f"{node.where}: needs a tensor operand, got {a!r} and {b!r}")
        if not isinstance(a, Value):
            b_value, a_value = self._with_number(node, b, a)  # type: ignore[arg-type]
            return a_value, b_value
        if not isinstance(b, Value):
            return self._with_number(node, a, b)
        if a.dtype != b.dtype:
            dtype = promote(a.dtype, b.dtype)
            a, b = self.cast(a, dtype, node), self.cast(b, dtype, node)
        return a, b

    def _with_number(self, node: TorchNode, tensor: Value, number: object) -> tuple[Value, Value]:
        if not isinstance(number, int | float | bool | np.number):
            raise ModelLoadError(f"{node.where}: operand {number!r} is neither tensor nor number")
        if isinstance(number, float) and tensor.dtype not in FLOAT_DTYPES:
            tensor = self.cast(tensor, DEFAULT_FLOAT, node)
        return tensor, self.scalar(number, tensor.dtype)


def promote(a: str, b: str) -> str:
    """The dtype two tensors of dtypes `a` and `b` compute in (torch's category rule:
    float beats integer beats bool, then the wider one)."""

    def rank(dtype: str) -> tuple[int, int]:
        category = 2 if dtype in FLOAT_DTYPES else 0 if dtype == "bool" else 1
        return category, np.dtype(dtype).itemsize

    return max(a, b, key=rank)


Result = Value | tuple[Value | None, ...] | None
Converter = Callable[[ConversionContext, TorchNode], Result]

CONVERTERS: dict[str, Converter] = {}


def converter(*targets: str) -> Callable[[Converter], Converter]:
    """Register a function as the converter of the given overloads
    (`"aten.add.Tensor"`)."""

    def register(function: Converter) -> Converter:
        for target in targets:
            if target in CONVERTERS:
                raise ValueError(f"two converters for {target}")
            CONVERTERS[target] = function
        return function

    return register


def unsupported(node: TorchNode, what: str) -> UnsupportedOperatorError:
    return UnsupportedOperatorError(f"{node.where}: {what}")
