"""ONNX frontend."""

from ember.frontend.onnx.loader import from_onnx

__all__ = ["from_onnx"]
