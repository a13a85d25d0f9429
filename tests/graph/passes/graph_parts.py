"""Parts of the graph-pass tests' graphs, and inputs to run them on: seeded random
weights, a batch norm with random statistics, random graph inputs."""

from __future__ import annotations

import numpy as np

from ember.graph import Graph, GraphBuilder, Value
from ember.graph.ops.attrs import BatchNormAttrs


def weight(shape: tuple[int, ...], seed: int = 0) -> np.ndarray:
    return np.random.default_rng(seed).standard_normal(shape).astype("float32")


def batch_norm(b: GraphBuilder, x: Value, axis: int = 1, name: str = "bn") -> Value:
    """A batch norm over `axis` of `x` whose statistics and affine parameters are
    random params named `{name}_scale`, ... (seeded by the channel count)."""
    channels = x.shape[axis]
    generator = np.random.default_rng(channels)
    vectors = [
        b.param(f"{name}_{what}", array.astype("float32"))
        for what, array in (
            ("scale", generator.uniform(0.5, 1.5, channels)),
            ("bias", generator.normal(0.0, 0.5, channels)),
            ("mean", generator.normal(0.0, 0.5, channels)),
            ("var", generator.uniform(0.5, 2.0, channels)),
        )
    ]
    return b.add("batch_norm", [x, *vectors], BatchNormAttrs(1e-5, axis), name=name)


def random_inputs(graph: Graph, seed: int = 0) -> dict[str, np.ndarray]:
    """Standard-normal arrays (small integers for integer inputs) for every input."""
    generator = np.random.default_rng(seed)
    inputs = {}
    for value in graph.inputs:
        if np.issubdtype(np.dtype(value.dtype), np.floating):
            array = generator.standard_normal(value.shape)
        else:
            array = generator.integers(-5, 6, size=value.shape)
        inputs[value.name] = array.astype(value.dtype)
    return inputs
