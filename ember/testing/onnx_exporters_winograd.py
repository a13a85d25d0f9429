"""ONNX exporters of the Winograd transforms (`ember.graph.ops.winograd`), in standard
ops, so ONNX Runtime checks them independently of Ember's references:

- `winograd_input`: the padded image (channels first) through a grouped Conv of
  stride m whose a*a filters per channel are the rows of Bᵀ ⊗ Bᵀ, then reshaped and
  transposed to `[a*a, N*T, C]`;
- `winograd_output`: `(Aᵀ ⊗ Aᵀ) @ M`, one MatMul over the a*a rows, the m x m pixels
  of each tile transposed into place and cropped to the conv's output.
"""

from __future__ import annotations

import numpy as np

from ember.graph.ir import Node
from ember.graph.ops.winograd import (
    WinogradInputAttrs,
    WinogradOutputAttrs,
    input_geometry,
    tile_counts,
    tiled_padding,
    transforms,
)
from ember.testing.to_onnx import Exporter, exporter


@exporter("winograd_input")
def _winograd_input(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, WinogradInputAttrs)
    batch, _, _, channels = node.inputs[0].shape
    input_t = transforms(attrs.tile).input
    points = input_t.shape[0]
    _, _, down, across = input_geometry(node.inputs[0].shape, attrs)
    top, left, bottom, right = tiled_padding(node.inputs[0].shape, attrs)
    # Filter (e = row * a + column) of each channel: Bᵀ[row] ⊗ Bᵀ[column] over the patch.
    filters = np.einsum("ea,fb->efab", input_t, input_t).reshape(points * points, 1, points, points)
    weight = export.constant(
        np.tile(filters, (channels, 1, 1, 1)).astype(node.inputs[0].dtype), "Bt"
    )
    name = node.name
    data = export.emit_one(
        "Transpose", [export.name(node.inputs[0])], f"{name}/nchw", perm=[0, 3, 1, 2]
    )
    tiles = export.emit_one(
        "Conv",
        [data, weight],
        f"{name}/tiles",
        kernel_shape=[points, points],
        strides=[attrs.tile, attrs.tile],
        pads=[top, left, bottom, right],
        group=channels,
    )
    shape = export.ints([batch, channels, points * points, down * across], f"{name}/shape")
    split = export.emit_one("Reshape", [tiles, shape], f"{name}/split")
    moved = export.emit_one("Transpose", [split], f"{name}/moved", perm=[2, 0, 3, 1])
    out_shape = export.ints(list(node.outputs[0].shape), f"{name}/out_shape")
    export.emit("Reshape", [moved, out_shape], [export.name(node.outputs[0])], hint=name)


@exporter("winograd_output")
def _winograd_output(export: Exporter, node: Node) -> None:
    attrs = node.attrs
    assert isinstance(attrs, WinogradOutputAttrs)
    rows, tiles, channels = node.inputs[0].shape
    output_t = transforms(attrs.tile).output
    tile = attrs.tile
    down, across = tile_counts(attrs.height, attrs.width, tile)
    batch = tiles // (down * across)
    name = node.name
    kron = np.einsum("ia,jb->ijab", output_t, output_t).reshape(tile * tile, rows)
    matrix = export.constant(kron.astype(node.inputs[0].dtype), "AtA")
    flat = export.emit_one(
        "Reshape", [export.name(node.inputs[0]), export.ints([rows, -1], f"{name}/flat")], name
    )
    pixels = export.emit_one("MatMul", [matrix, flat], f"{name}/pixels")
    shape = export.ints([tile, tile, batch, down, across, channels], f"{name}/shape")
    split = export.emit_one("Reshape", [pixels, shape], f"{name}/split")
    placed = export.emit_one("Transpose", [split], f"{name}/placed", perm=[2, 3, 0, 4, 1, 5])
    image_shape = export.ints([batch, down * tile, across * tile, channels], f"{name}/image")
    image = export.emit_one("Reshape", [placed, image_shape], f"{name}/image")
    starts = export.ints([0, 0], f"{name}/starts")
    ends = export.ints([attrs.height, attrs.width], f"{name}/ends")
    axes = export.ints([1, 2], f"{name}/axes")
    export.emit("Slice", [image, starts, ends, axes], [export.name(node.outputs[0])], hint=name)
