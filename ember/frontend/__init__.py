"""Frontends: model formats in, `(Graph, params)` out."""

from ember.frontend.onnx import from_onnx
from ember.frontend.pytorch import from_pytorch

__all__ = ["from_onnx", "from_pytorch"]
