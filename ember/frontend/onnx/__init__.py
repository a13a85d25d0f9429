"""ONNX frontend: `from_onnx(model, shapes=None) -> (graph, params)`.

`loader.py` reads and checks the model and drives the conversion; `registry.py` holds
the converter table; `math.py`, `nn.py`, `tensor.py`, `reduce.py` hold one converter per
ONNX op type (registered on import).
"""

from ember.frontend.onnx.loader import from_onnx, read_model

__all__ = ["from_onnx", "read_model"]
