"""Built-in workloads: well-known networks with seeded random weights.

`get_workload("resnet-50", batch_size=1, layout="NHWC")` returns `(graph, params)` with
one input named "data" and one output, the (batch, classes) softmax. The weights are
drawn from a fixed seed (the same on every run and machine) and are identical, up to
transposition, in both layouts, so NCHW and NHWC variants compute the same function.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from functools import partial

import numpy as np

from ember.errors import ShapeError, WorkloadError
from ember.graph.ir import FLOAT_DTYPES, Graph, Params, Value
from ember.testing.workloads.inception import inception_v3
from ember.testing.workloads.layers import LAYOUTS, Layout, NetBuilder
from ember.testing.workloads.mlp import mlp
from ember.testing.workloads.mobilenet import mobilenet, mobilenet_v2
from ember.testing.workloads.mobilenet_v3 import mobilenet_v3_small
from ember.testing.workloads.resnet import resnet
from ember.testing.workloads.resnet3d import resnet3d
from ember.testing.workloads.squeezenet import squeezenet_v1_1

NetworkFn = Callable[[NetBuilder, Value, int], Value]


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """How to build one named network and what input it expects by default."""

    build: NetworkFn
    # Image shape channels-first, without the batch axis: (C, H, W) or (C, D, H, W).
    default_image: tuple[int, ...] = (3, 224, 224)

    @property
    def spatial_rank(self) -> int:
        return len(self.default_image) - 1


WORKLOADS: dict[str, WorkloadSpec] = {
    **{
        f"resnet-{layers}": WorkloadSpec(partial(resnet, num_layers=layers))
        for layers in (18, 34, 50, 101, 152)
    },
    **{
        f"resnet3d-{layers}": WorkloadSpec(
            partial(resnet3d, num_layers=layers), default_image=(3, 16, 112, 112)
        )
        for layers in (18, 34, 50)
    },
    "mobilenet": WorkloadSpec(mobilenet),
    "mobilenet_v2": WorkloadSpec(mobilenet_v2),
    "mobilenet_v3_small": WorkloadSpec(mobilenet_v3_small),
    "squeezenet_v1.1": WorkloadSpec(squeezenet_v1_1),
    "inception_v3": WorkloadSpec(inception_v3, default_image=(3, 299, 299)),
    "mlp": WorkloadSpec(mlp),
}

# Layout names accepted per spatial rank. 3-D networks also take the 2-D names, meaning
# channels first or last, as callers that loop over all networks pass those.
_LAYOUT_NAMES: dict[int, dict[str, str]] = {
    2: {"NCHW": "NCHW", "NHWC": "NHWC"},
    3: {"NCDHW": "NCDHW", "NDHWC": "NDHWC", "NCHW": "NCDHW", "NHWC": "NDHWC"},
}


def list_workloads() -> list[str]:
    """Names accepted by `get_workload`."""
    return list(WORKLOADS)


def get_workload(
    name: str,
    batch_size: int = 1,
    layout: str = "NCHW",
    dtype: str = "float32",
    image_shape: tuple[int, ...] | None = None,
    num_classes: int = 1000,
) -> tuple[Graph, Params]:
    """Build a built-in network. `image_shape` excludes the batch axis and is in the
    layout's order: (3, 224, 224) for NCHW, (224, 224, 3) for NHWC, (3, 16, 112, 112)
    for NCDHW; the default is the network's usual input size."""
    spec = WORKLOADS.get(name)
    if spec is None:
        raise WorkloadError(
            f"unknown workload {name!r}; the built-in workloads are {', '.join(WORKLOADS)}"
        )
    resolved = _resolve_layout(name, spec, layout)
    if dtype not in FLOAT_DTYPES:
        raise WorkloadError(f"dtype {dtype!r} is not supported; use one of {FLOAT_DTYPES}")
    for what, count in (("batch_size", batch_size), ("num_classes", num_classes)):
        if not isinstance(count, int | np.integer) or isinstance(count, bool) or count < 1:
            raise WorkloadError(f"{what} must be a positive integer, got {count!r}")
    shape = _image_shape(name, spec, resolved, image_shape)
    net = NetBuilder(name, resolved, dtype)
    data = net.graph.input("data", (batch_size, *shape), dtype)
    try:
        output = spec.build(net, data, num_classes)
    except ShapeError as error:
        raise WorkloadError(
            f"{name} cannot take images of shape {shape}: {error}; use a larger image_shape"
        ) from error
    return net.build(output)


def _resolve_layout(name: str, spec: WorkloadSpec, layout: str) -> Layout:
    accepted = _LAYOUT_NAMES[spec.spatial_rank]
    if layout not in accepted:
        raise WorkloadError(
            f"layout {layout!r} is not supported by {name}; use one of {', '.join(accepted)}"
        )
    return LAYOUTS[accepted[layout]]


def _image_shape(
    name: str, spec: WorkloadSpec, layout: Layout, image_shape: tuple[int, ...] | None
) -> tuple[int, ...]:
    """The per-example input shape in the layout's axis order."""
    if image_shape is None:
        channels, *spatial = spec.default_image
        return (*spatial, channels) if layout.channels_last else spec.default_image
    shape = tuple(image_shape)
    valid = all(isinstance(d, int | np.integer) and d > 0 for d in shape)
    if len(shape) != spec.spatial_rank + 1 or not valid:
        order = layout.data[1:]
        raise WorkloadError(
            f"image_shape {image_shape!r} for {name} must be {spec.spatial_rank + 1} "
            f"positive integers in {layout.data} order ({order}), without the batch axis"
        )
    return tuple(int(d) for d in shape)


__all__ = ["WORKLOADS", "WorkloadSpec", "get_workload", "list_workloads"]
