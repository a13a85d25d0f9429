"""Write TFLite flatbuffers from Python: the test models of the TFLite frontend.

Built with the `tflite` package's generated flatbuffer builders (the schema, kept by
its maintainers), so no converter and no TensorFlow are needed to make a model:

    model = TFLiteModel()
    x = model.input("image", (1, 32, 32, 3))
    w = model.constant("conv/weight", weights)                 # OHWI
    y = model.operator("CONV_2D", [x, w, b], (1, 16, 16, 8), "Conv2DOptions",
                       Padding="SAME", StrideW=2, StrideH=2, FusedActivationFunction="RELU6")
    model.output(y)
    data = model.build()                                        # bytes of a .tflite file

Options are given by the schema's field names (`StrideW`), and enum values by their
schema names ("SAME", "RELU6"). `tflite_layers` builds whole networks with it.
"""

from __future__ import annotations

import importlib
from collections.abc import Sequence
from dataclasses import dataclass, field

import flatbuffers
import numpy as np
import tflite

# The schema's identifier, at bytes 4-8 of every file.
FILE_IDENTIFIER = b"TFL3"
SCHEMA_VERSION = 3
# TFLite aligns buffer data to 16 bytes (the schema's force_align).
BUFFER_ALIGNMENT = 16

_TENSOR_TYPES = {
    "float32": tflite.TensorType.FLOAT32,
    "float16": tflite.TensorType.FLOAT16,
    "int32": tflite.TensorType.INT32,
    "int64": tflite.TensorType.INT64,
    "int8": tflite.TensorType.INT8,
    "uint8": tflite.TensorType.UINT8,
    "bool": tflite.TensorType.BOOL,
}

# Enum-valued option fields and where their names live.
_ENUMS = {
    "Padding": tflite.Padding,
    "FusedActivationFunction": tflite.ActivationFunctionType,
}


@dataclass
class _Tensor:
    name: str
    shape: tuple[int, ...]
    dtype: str
    buffer: int
    quantization: tuple[np.ndarray, np.ndarray, int] | None = None


@dataclass
class _Operator:
    code: int
    inputs: list[int]
    outputs: list[int]
    options: str | None
    fields: dict[str, object] = field(default_factory=dict)


class TFLiteModel:
    """One subgraph's tensors and operators, written out by `build`."""

    def __init__(self, description: str = "ember test model") -> None:
        self.description = description
        self._tensors: list[_Tensor] = []
        self._buffers: list[bytes] = [b""]  # buffer 0: the empty sentinel
        self._operators: list[_Operator] = []
        self._codes: list[int] = []
        self._inputs: list[int] = []
        self._outputs: list[int] = []

    # -- tensors ---------------------------------------------------------------------

    def tensor(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str = "float32",
        quantization: tuple[Sequence[float], Sequence[int], int] | None = None,
    ) -> int:
        """An activation: no data of its own; `quantization` (scales, zero points,
        quantized dimension) for integer activations."""
        quant = _quantization(quantization)
        self._tensors.append(_Tensor(name, tuple(int(d) for d in shape), dtype, 0, quant))
        return len(self._tensors) - 1

    def input(
        self,
        name: str,
        shape: Sequence[int],
        dtype: str = "float32",
        quantization: tuple[Sequence[float], Sequence[int], int] | None = None,
    ) -> int:
        index = self.tensor(name, shape, dtype, quantization)
        self._inputs.append(index)
        return index

    def output(self, index: int) -> None:
        self._outputs.append(index)

    def constant(
        self,
        name: str,
        array: np.ndarray,
        quantization: tuple[Sequence[float], Sequence[int], int] | None = None,
    ) -> int:
        """A tensor with data (weights, shapes, axes); `quantization` is (scales,
        zero points, quantized dimension) for int8 weights."""
        array = np.ascontiguousarray(array)
        self._buffers.append(array.tobytes())
        dtype = "bool" if array.dtype == np.bool_ else str(array.dtype)
        quant = _quantization(quantization)
        self._tensors.append(_Tensor(name, array.shape, dtype, len(self._buffers) - 1, quant))
        return len(self._tensors) - 1

    def shape_of(self, index: int) -> tuple[int, ...]:
        return self._tensors[index].shape

    # -- operators -------------------------------------------------------------------

    def operator(
        self,
        op: str,
        inputs: Sequence[int],
        output_shape: Sequence[int],
        options: str | None = None,
        output_dtype: str = "float32",
        output_quantization: tuple[Sequence[float], Sequence[int], int] | None = None,
        **fields: object,
    ) -> int:
        """Apply builtin operator `op` ("CONV_2D"); returns its (one) output tensor.
        An input of -1 is an omitted optional input."""
        name = f"{op.lower()}_{len(self._operators)}"
        output = self.tensor(name, output_shape, output_dtype, output_quantization)
        self.operator_multi(op, inputs, [output], options, **fields)
        return output

    def operator_multi(
        self,
        op: str,
        inputs: Sequence[int],
        outputs: Sequence[int],
        options: str | None = None,
        **fields: object,
    ) -> None:
        code = getattr(tflite.BuiltinOperator, op)
        if code not in self._codes:
            self._codes.append(code)
        self._operators.append(_Operator(code, list(inputs), list(outputs), options, fields))

    # -- writing ---------------------------------------------------------------------

    def build(self) -> bytes:
        builder = flatbuffers.Builder(1024)
        buffers = [self._buffer(builder, data) for data in self._buffers]
        tensors = [self._tensor(builder, t) for t in self._tensors]
        operators = [self._operator(builder, op) for op in self._operators]
        codes = [self._code(builder, code) for code in self._codes]
        name = builder.CreateString("main")
        subgraph_fields = (
            ("Tensors", _offsets(builder, tflite.SubGraphStartTensorsVector, tensors)),
            ("Inputs", builder.CreateNumpyVector(np.asarray(self._inputs, np.int32))),
            ("Outputs", builder.CreateNumpyVector(np.asarray(self._outputs, np.int32))),
            ("Operators", _offsets(builder, tflite.SubGraphStartOperatorsVector, operators)),
        )
        tflite.SubGraphStart(builder)
        for field_name, value in subgraph_fields:
            getattr(tflite, f"SubGraphAdd{field_name}")(builder, value)
        tflite.SubGraphAddName(builder, name)
        subgraph = tflite.SubGraphEnd(builder)
        model_fields = (
            ("OperatorCodes", _offsets(builder, tflite.ModelStartOperatorCodesVector, codes)),
            ("Subgraphs", _offsets(builder, tflite.ModelStartSubgraphsVector, [subgraph])),
            ("Description", builder.CreateString(self.description)),
            ("Buffers", _offsets(builder, tflite.ModelStartBuffersVector, buffers)),
        )
        tflite.ModelStart(builder)
        tflite.ModelAddVersion(builder, SCHEMA_VERSION)
        for field_name, value in model_fields:
            getattr(tflite, f"ModelAdd{field_name}")(builder, value)
        builder.Finish(tflite.ModelEnd(builder), file_identifier=FILE_IDENTIFIER)
        return bytes(builder.Output())

    @staticmethod
    def _buffer(builder: flatbuffers.Builder, data: bytes) -> int:
        vector = None
        if data:
            builder.StartVector(1, len(data), BUFFER_ALIGNMENT)
            builder.head = builder.head - len(data)
            builder.Bytes[builder.head : builder.head + len(data)] = data
            vector = builder.EndVector()
        tflite.BufferStart(builder)
        if vector is not None:
            tflite.BufferAddData(builder, vector)
        return tflite.BufferEnd(builder)

    @staticmethod
    def _tensor(builder: flatbuffers.Builder, tensor: _Tensor) -> int:
        name = builder.CreateString(tensor.name)
        shape = builder.CreateNumpyVector(np.asarray(tensor.shape, np.int32))
        quantization = None
        if tensor.quantization is not None:
            scales, zeros, axis = tensor.quantization
            scale_vector = builder.CreateNumpyVector(scales)
            zero_vector = builder.CreateNumpyVector(zeros)
            tflite.QuantizationParametersStart(builder)
            tflite.QuantizationParametersAddScale(builder, scale_vector)
            tflite.QuantizationParametersAddZeroPoint(builder, zero_vector)
            tflite.QuantizationParametersAddQuantizedDimension(builder, axis)
            quantization = tflite.QuantizationParametersEnd(builder)
        tflite.TensorStart(builder)
        tflite.TensorAddShape(builder, shape)
        tflite.TensorAddType(builder, _TENSOR_TYPES[tensor.dtype])
        tflite.TensorAddBuffer(builder, tensor.buffer)
        tflite.TensorAddName(builder, name)
        if quantization is not None:
            tflite.TensorAddQuantization(builder, quantization)
        return tflite.TensorEnd(builder)

    @staticmethod
    def _code(builder: flatbuffers.Builder, code: int) -> int:
        tflite.OperatorCodeStart(builder)
        # Readers take the larger of the two fields; the old one stops at 127.
        tflite.OperatorCodeAddDeprecatedBuiltinCode(builder, min(code, 127))
        tflite.OperatorCodeAddBuiltinCode(builder, code)
        tflite.OperatorCodeAddVersion(builder, 1)
        return tflite.OperatorCodeEnd(builder)

    def _operator(self, builder: flatbuffers.Builder, op: _Operator) -> int:
        inputs = builder.CreateNumpyVector(np.asarray(op.inputs, np.int32))
        outputs = builder.CreateNumpyVector(np.asarray(op.outputs, np.int32))
        options = None if op.options is None else _options(builder, op.options, op.fields)
        tflite.OperatorStart(builder)
        tflite.OperatorAddOpcodeIndex(builder, self._codes.index(op.code))
        tflite.OperatorAddInputs(builder, inputs)
        tflite.OperatorAddOutputs(builder, outputs)
        if options is not None and op.options is not None:
            tflite.OperatorAddBuiltinOptionsType(
                builder, getattr(tflite.BuiltinOptions, op.options)
            )
            tflite.OperatorAddBuiltinOptions(builder, options)
        return tflite.OperatorEnd(builder)


def _quantization(
    given: tuple[Sequence[float], Sequence[int], int] | None,
) -> tuple[np.ndarray, np.ndarray, int] | None:
    if given is None:
        return None
    scales, zeros, axis = given
    return np.asarray(scales, np.float32), np.asarray(zeros, np.int64), axis


def _offsets(builder: flatbuffers.Builder, start: object, offsets: Sequence[int]) -> int:
    start(builder, len(offsets))  # type: ignore[operator]
    for offset in reversed(offsets):
        builder.PrependUOffsetTRelative(offset)
    return builder.EndVector()


def _options(builder: flatbuffers.Builder, kind: str, fields: dict[str, object]) -> int:
    """An options table (`Conv2DOptions`) from schema field names; list values become
    int32 vectors, enum names their numbers."""
    module = importlib.import_module(f"tflite.{kind}")
    values: dict[str, object] = {}
    for name, value in fields.items():
        if isinstance(value, list | tuple):
            values[name] = builder.CreateNumpyVector(np.asarray(value, np.int32))
        elif isinstance(value, str):
            values[name] = getattr(_ENUMS[name], value)
        else:
            values[name] = value
    getattr(module, f"{kind}Start")(builder)
    for name, value in values.items():
        getattr(module, f"{kind}Add{name}")(builder, value)
    return getattr(module, f"{kind}End")(builder)
