"""TFLite frontend: `from_tflite(path_or_bytes) -> (graph, params)`.

`loader.py` reads the flatbuffer (with the `tflite` schema package) and drives the
conversion; `registry.py` holds the converter table; `nn.py`, `math.py` and
`tensor.py` hold one converter per builtin operator (registered on import).
"""

from ember.frontend.tflite.loader import from_tflite

__all__ = ["from_tflite"]
