"""PyTorch frontend: `from_pytorch(model, example_inputs) -> (graph, params)`, through
`torch.export` and the core ATen operator set.

`loader.py` exports or reads the program and drives the conversion; `registry.py`
holds the converter table; `nn.py`, `tensor.py` and `math.py` hold one converter per
ATen overload (registered on import). torch is optional: it is imported when a
PyTorch program is converted.
"""

from ember.frontend.pytorch.loader import (
    decomposed,
    exported_program,
    from_pytorch,
    load_program,
)

__all__ = ["decomposed", "exported_program", "from_pytorch", "load_program"]
