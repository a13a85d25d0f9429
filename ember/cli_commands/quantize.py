"""`ember quantize MODEL.onnx --calibration inputs.npz -o MODEL.int8.onnx`: static int8
quantization of an ONNX model, a thin wrapper over ONNX Runtime's quantizer
(`onnxruntime.quantization.quantize_static`), not a quantizer of Ember's own.

What it fixes for the user: the calibration data comes from an .npz file (one array
per model input, its first axis enumerating the samples), and the defaults are the
ones Ember's int8 import reads and ONNX Runtime recommends on x86: QDQ format, int8
weights per output channel, uint8 activations, min-max calibration.
"""

from __future__ import annotations

import argparse
import tempfile
from collections import Counter
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import onnx

from ember.errors import EmberError, UsageError

CALIBRATION_METHODS = ("minmax", "entropy", "percentile")


def _quantization_module() -> Any:
    try:
        from onnxruntime import quantization
    except ImportError as error:
        raise EmberError(
            "ember quantize runs ONNX Runtime's quantizer, which is not installed: "
            "pip install 'ember[quantize]' (or pip install onnxruntime)"
        ) from error
    return quantization


def calibration_samples(path: Path, model: onnx.ModelProto) -> list[dict[str, np.ndarray]]:
    """The samples of an .npz: for each graph input an array of shape (samples,
    *input shape), or (samples, *input shape without its batch of 1)."""
    if not path.is_file():
        raise UsageError(f"{path}: no such calibration file")
    initializers = {init.name for init in model.graph.initializer}
    inputs = [value for value in model.graph.input if value.name not in initializers]
    with np.load(path) as data:
        arrays = {name: data[name] for name in data.files}
    missing = [value.name for value in inputs if value.name not in arrays]
    if missing:
        raise UsageError(
            f"{path}: no array for model input(s) {missing}; the file has {sorted(arrays)}"
        )
    counts = set()
    shaped: dict[str, np.ndarray] = {}
    for value in inputs:
        dims = [
            d.dim_value if d.HasField("dim_value") else None
            for d in value.type.tensor_type.shape.dim
        ]
        array = arrays[value.name]
        if array.ndim == len(dims):  # (samples, ...) where the model's batch axis goes
            array = array[:, None] if dims and dims[0] == 1 else array
        if array.ndim != len(dims) + 1 or any(
            want is not None and want != got
            for want, got in zip(dims, array.shape[1:], strict=True)
        ):
            raise UsageError(
                f"{path}: array {value.name!r} of shape {list(arrays[value.name].shape)} does not "
                f"hold samples of the input's shape {dims} (samples along the first axis)"
            )
        shaped[value.name] = array
        counts.add(array.shape[0])
    if len(counts) != 1:
        raise UsageError(f"{path}: the inputs' arrays hold different numbers of samples: {counts}")
    count = counts.pop()
    return [{name: array[i] for name, array in shaped.items()} for i in range(count)]


def quantize(
    model_path: Path,
    calibration: Path,
    output: Path,
    per_channel: bool = True,
    activation_type: str = "uint8",
    method: str = "minmax",
) -> Counter[str]:
    """Write the quantized model; returns its operator counts."""
    quantization = _quantization_module()
    if not model_path.is_file():
        raise UsageError(f"{model_path}: no such model file")
    model = onnx.load(model_path)
    samples = calibration_samples(calibration, model)

    class Reader(quantization.CalibrationDataReader):  # type: ignore[name-defined]
        def __init__(self) -> None:
            self._samples: Iterator[dict[str, np.ndarray]] = iter(samples)

        def get_next(self) -> dict[str, np.ndarray] | None:
            return next(self._samples, None)

    types = {"uint8": quantization.QuantType.QUInt8, "int8": quantization.QuantType.QInt8}
    methods = {
        "minmax": quantization.CalibrationMethod.MinMax,
        "entropy": quantization.CalibrationMethod.Entropy,
        "percentile": quantization.CalibrationMethod.Percentile,
    }
    with tempfile.TemporaryDirectory() as scratch:
        # The quantizer writes its augmented calibration model next to a path we own.
        prepared = Path(scratch) / "model.onnx"
        onnx.save(model, prepared)
        quantization.quantize_static(
            str(prepared),
            str(output),
            Reader(),
            quant_format=quantization.QuantFormat.QDQ,
            per_channel=per_channel,
            activation_type=types[activation_type],
            weight_type=quantization.QuantType.QInt8,
            calibrate_method=methods[method],
        )
    return Counter(node.op_type for node in onnx.load(output).graph.node)


def command_quantize(args: argparse.Namespace) -> int:
    output = args.output or args.model.with_suffix(".int8.onnx")
    counts = quantize(args.model, args.calibration, output, not args.per_tensor,
                      args.activation_type, args.calibrate_method)  # fmt: skip
    size = output.stat().st_size / 2**20
    print(
        f"wrote {output} ({size:.1f} MiB): {counts['QuantizeLinear']} QuantizeLinear, "
        f"{counts['DequantizeLinear']} DequantizeLinear around {sum(counts.values())} nodes"
    )
    return 0


def add_parser(commands: Any) -> None:
    parser = commands.add_parser(
        "quantize",
        help="static int8 quantization of an ONNX model (ONNX Runtime's quantizer, QDQ)",
    )
    parser.add_argument("model", type=Path, help="the float ONNX model")
    parser.add_argument(
        "--calibration", type=Path, required=True,
        help=".npz with one array per model input: samples along the first axis",
    )  # fmt: skip
    parser.add_argument("-o", "--output", type=Path, help="default: MODEL.int8.onnx")
    parser.add_argument(
        "--per-tensor",
        action="store_true",
        help="one weight scale per tensor (default: per output channel)",
    )
    parser.add_argument("--activation-type", choices=("uint8", "int8"), default="uint8")
    parser.add_argument("--calibrate-method", choices=CALIBRATION_METHODS, default="minmax")
    parser.set_defaults(run=command_quantize)
