"""`from_tflite`: read a TFLite flatbuffer and convert its main subgraph into an Ember
graph and its params.

The steps, in order, each failing with an `EmberError` that says what to fix:

1. read the file (or bytes) and check the schema's identifier ("TFL3");
2. name every operator (builtin code, or the custom code of a custom operator) and
   report all unsupported ones in one error, with counts;
3. check that every integer activation carries its quantization parameters;
4. constant tensors become params (under the tensor's name) when first read; the
   subgraph's inputs become graph inputs, in NHWC as the model has them;
5. convert the operators in order through one `GraphBuilder` with constant folding
   on, checking each output against the shape and dtype the model declares;
6. give the outputs the model's output tensor names and verify.

Quantized models (full-integer: int8 or uint8 activations, int8 weights with a scale
per output channel, int32 biases; also int16 activations) run each operator as its
float form between a dequantize of its quantized inputs and a quantize of its
quantized outputs (`ember.frontend.quantization`: round half to even, saturate).
Dequantized biases fold into float params at import; an int8 weight's dequantization
stays as nodes, for the `quantized_ops` pass to run convs and fully-connected layers as
exact integer sums. For operators that only move values (reshapes, pools,
concatenations on one grid) this is exact; for arithmetic, LiteRT's fixed-point
requantization can round a value on the edge of a step the other way, so outputs agree
within one quantization step.

The flatbuffer is read with the `tflite` package (the schema's generated reader).
"""

from __future__ import annotations

import functools
import importlib
import os
from collections import Counter
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np

from ember.errors import EmberError, ModelLoadError, UnsupportedOperatorError
from ember.frontend.naming import build_with_output_names
from ember.frontend.quantization import (
    QUANTIZED_RANGES,
    dequantize_value,
    quantization_constants,
    quantize_value,
)
from ember.frontend.tflite.registry import CONVERTERS, TFLiteNode
from ember.graph.builder import GraphBuilder
from ember.graph.ir import Graph, Params, TensorType, Value
from ember.graph.verify import verify

# Converter families register themselves on import.
for _family in ("nn", "math", "tensor"):
    importlib.import_module(f"ember.frontend.tflite.{_family}")

FILE_IDENTIFIER = b"TFL3"

# Schema TensorType -> Ember dtype.
_DTYPES = {
    0: "float32", 1: "float16", 2: "int32", 3: "uint8", 4: "int64", 6: "bool", 7: "int16",
    9: "int8", 10: "float64", 12: "uint64", 15: "uint32", 16: "uint16",
}  # fmt: skip


def _tflite() -> Any:
    try:
        import tflite
    except ImportError as error:  # a base dependency; only a broken install lacks it
        raise EmberError(
            "reading TFLite models needs the 'tflite' package: pip install tflite"
        ) from error
    return tflite


@dataclass
class _TensorInfo:
    name: str
    type: TensorType
    data: np.ndarray | None
    quantization: tuple[np.ndarray, np.ndarray, int] | None


def from_tflite(model: str | os.PathLike[str] | bytes) -> tuple[Graph, Params]:
    """Convert a TFLite model (a path or the file's bytes) into `(graph, params)`."""
    tflite = _tflite()
    data, origin = _read(model)
    root = tflite.Model.GetRootAs(data, 0)
    if root.SubgraphsLength() < 1:
        raise ModelLoadError(f"{origin}: the model has no subgraph")
    subgraph = root.Subgraphs(0)
    op_names = [
        _operator_name(tflite, root.OperatorCodes(i)) for i in range(root.OperatorCodesLength())
    ]
    operators = [subgraph.Operators(i) for i in range(subgraph.OperatorsLength())]
    _check_supported(origin, [op_names[op.OpcodeIndex()] for op in operators])
    tensors = [
        _tensor_info(tflite, root, subgraph.Tensors(i), data, origin)
        for i in range(subgraph.TensorsLength())
    ]
    _check_quantization(origin, tensors)

    builder = GraphBuilder(
        name=Path(origin).stem if origin != "<bytes>" else "tflite", fold_constants=True
    )
    env: dict[int, Value] = {}
    input_indices = _vector(subgraph.InputsAsNumpy, subgraph.InputsLength())
    for index in input_indices:
        info = tensors[index]
        env[index] = builder.input(info.name, info.type.shape, info.type.dtype)
    output_indices = _vector(subgraph.OutputsAsNumpy, subgraph.OutputsLength())
    for index in output_indices:
        builder.fresh_name(tensors[index].name)  # reserved for the output

    def value_of(index: int) -> Value | None:
        if index < 0:
            return None
        if index not in env:
            info = tensors[index]
            if info.data is None:
                raise ModelLoadError(f"{origin}: tensor {info.name!r} is read before it is written")
            env[index] = builder.param(info.name, info.data)
        return env[index]

    for position, op in enumerate(operators):
        name = op_names[op.OpcodeIndex()]
        in_indices = _vector(op.InputsAsNumpy, op.InputsLength())
        out_indices = _vector(op.OutputsAsNumpy, op.OutputsLength())
        # Quantized operators run as their float form between a dequantize of their
        # quantized inputs and a quantize of their quantized outputs (module docstring);
        # QUANTIZE and DEQUANTIZE are those steps themselves.
        emulate = name not in ("QUANTIZE", "DEQUANTIZE")
        inputs = []
        for i in in_indices:
            value = value_of(i)
            if emulate and value is not None and _is_quantized(tensors[i]):
                value = _dequantized(builder, value, tensors[i])
            inputs.append(value)
        node = TFLiteNode(
            op=name,
            index=position,
            inputs=inputs,
            output_types=[
                TensorType(tensors[i].type.shape, "float32")
                if emulate and _is_quantized(tensors[i])
                else tensors[i].type
                for i in out_indices
            ],
            options=_options(tflite, op),
            builder=builder,
            quantization=[tensors[i].quantization if i >= 0 else None for i in in_indices],
            output_quantization=[tensors[i].quantization for i in out_indices],
        )
        results = CONVERTERS[name](node)
        if len(results) != len(out_indices):
            raise ModelLoadError(
                f"{node.where}: converted to {len(results)} outputs, the model has "
                f"{len(out_indices)}"
            )
        for index, value in zip(out_indices, results, strict=True):
            info = tensors[index]
            if emulate and _is_quantized(info):
                scale, zero = _parameters(builder, info)
                q_name = builder.fresh_name(f"{info.name}_q")
                dtype = info.type.dtype
                value = quantize_value(builder, value, scale, zero, dtype, q_name, half_away=True)
            if value.shape != info.type.shape or value.dtype != info.type.dtype:
                raise ModelLoadError(
                    f"{node.where}: output {info.name!r} converted to {value.type}, the "
                    f"model declares {info.type}"
                )
            env[index] = value
    outputs = [(tensors[i].name, value_of(i)) for i in output_indices]
    input_names = {tensors[i].name for i in input_indices}
    graph, params = build_with_output_names(builder, outputs, input_names)  # type: ignore[arg-type]
    verify(graph, params)
    return graph, params


# -- reading ------------------------------------------------------------------------------


def _read(model: str | os.PathLike[str] | bytes) -> tuple[bytes, str]:
    if isinstance(model, bytes | bytearray):
        data, origin = bytes(model), "<bytes>"
    else:
        path = Path(model)
        if not path.is_file():
            raise ModelLoadError(f"{path}: no such file")
        data, origin = path.read_bytes(), str(path)
    if len(data) < 8 or data[4:8] != FILE_IDENTIFIER:
        raise ModelLoadError(
            f"{origin}: not a TFLite model (a flatbuffer with the identifier 'TFL3' at byte 4)"
        )
    return data, origin


def _vector(read: Any, length: int) -> list[int]:
    """A flatbuffer int vector as a list (the reader returns 0 for an absent one)."""
    return [int(i) for i in read()] if length else []


@functools.cache
def _enum_names(enum: type) -> dict[int, str]:
    """Number -> name of a schema enum class (`BuiltinOperator`), built once."""
    return {v: k for k, v in vars(enum).items() if not k.startswith("_")}


def _operator_name(tflite: Any, code: Any) -> str:
    """The builtin operator's schema name, or "CUSTOM:<name>" for a custom one."""
    number = max(code.BuiltinCode(), code.DeprecatedBuiltinCode())
    name = _enum_names(tflite.BuiltinOperator).get(number, f"BUILTIN_{number}")
    if name == "CUSTOM":
        custom = code.CustomCode()
        return f"CUSTOM:{custom.decode() if custom else '?'}"
    return name


def _check_supported(origin: str, names: list[str]) -> None:
    counts = Counter(name for name in names if name not in CONVERTERS)
    if not counts:
        return
    examples = {name: names.index(name) for name in counts}
    listing = ", ".join(
        f"{name} (x{count}, e.g. operator #{examples[name]})" for name, count in counts.items()
    )
    noun = "operator" if len(counts) == 1 else "operators"
    raise UnsupportedOperatorError(
        f"{origin}: model uses {len(counts)} {noun} Ember cannot import: {listing}"
    )


def _tensor_info(tflite: Any, root: Any, tensor: Any, data: bytes, origin: str) -> _TensorInfo:
    name = tensor.Name().decode() if tensor.Name() else f"tensor_{id(tensor)}"
    code = tensor.Type()
    if code not in _DTYPES:
        names = _enum_names(tflite.TensorType)
        raise UnsupportedOperatorError(
            f"{origin}: tensor {name!r} has type {names.get(code, code)}, which Ember does not "
            f"support; supported: {', '.join(sorted(set(_DTYPES.values())))}"
        )
    dtype = _DTYPES[code]
    shape = tuple(_vector(tensor.ShapeAsNumpy, tensor.ShapeLength()))
    array = None
    buffer = root.Buffers(tensor.Buffer()) if tensor.Buffer() < root.BuffersLength() else None
    if buffer is not None:
        raw: bytes | None = None
        if buffer.Offset() > 1:  # data stored after the flatbuffer (models over 2 GiB)
            raw = data[buffer.Offset() : buffer.Offset() + buffer.Size()]
        elif buffer.DataLength():
            raw = buffer.DataAsNumpy().tobytes()
        if raw:
            array = np.frombuffer(raw, dtype=dtype).reshape(shape).copy()
    quantization = None
    q = tensor.Quantization()
    if q is not None and q.ScaleLength():
        zeros = q.ZeroPointAsNumpy() if q.ZeroPointLength() else np.zeros(q.ScaleLength(), np.int64)
        quantization = (
            q.ScaleAsNumpy().astype(np.float32),
            np.asarray(zeros, np.int64),
            q.QuantizedDimension(),
        )
    return _TensorInfo(name, TensorType(shape, dtype), array, quantization)


def _check_quantization(origin: str, tensors: list[_TensorInfo]) -> None:
    """Integer activations must carry their scale and zero point (what they stand for)."""
    for info in tensors:
        if info.data is None and info.type.dtype in QUANTIZED_RANGES and info.quantization is None:
            raise UnsupportedOperatorError(
                f"{origin}: tensor {info.name!r} is {info.type.dtype} without quantization "
                "parameters; Ember reads integer activations as quantized values only"
            )


def _is_quantized(info: _TensorInfo) -> bool:
    """A tensor of integers standing for real values (an int32 bias counts)."""
    return info.quantization is not None and info.type.dtype in (*QUANTIZED_RANGES, "int32")


def _parameters(builder: GraphBuilder, info: _TensorInfo) -> tuple[Value, Value | None]:
    assert info.quantization is not None
    scales, zeros, axis = info.quantization
    return quantization_constants(builder, scales, zeros, axis, len(info.type.shape))


def _dequantized(builder: GraphBuilder, value: Value, info: _TensorInfo) -> Value:
    name = builder.fresh_name(f"{info.name}_dq")
    # An int8 weight stays int8 behind its dequantization (nodes, not a folded float
    # param) for the quantized_ops pass; fold_constants folds what it leaves.
    weight = info.data is not None and info.type.dtype == "int8"
    with builder.folding(not weight):
        return dequantize_value(builder, value, *_parameters(builder, info), name)


def _options(tflite: Any, op: Any) -> object | None:
    """The operator's options table as the schema's reader class, or None."""
    kind = op.BuiltinOptionsType()
    if not kind:
        return None
    reader = getattr(tflite, _enum_names(tflite.BuiltinOptions)[kind], None)
    table = op.BuiltinOptions()
    if reader is None or table is None:
        return None
    options = reader()
    options.Init(table.Bytes, table.Pos)
    return options
