"""Frontends: model formats in, `(Graph, params)` out."""

from ember.frontend.onnx import from_onnx
from ember.frontend.pytorch import from_pytorch
from ember.frontend.tflite import from_tflite

__all__ = ["from_onnx", "from_pytorch", "from_tflite"]
