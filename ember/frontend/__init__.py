"""Frontends: model formats in, `(Graph, params)` out."""

from ember.frontend.onnx import from_onnx

__all__ = ["from_onnx"]
