"""dense_pack and conv_pack: their references equal dense / conv on the unpacked weight
(and ONNX Runtime's MatMul), the pack/unpack helpers are inverse, MAC counts, and
type-inference errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_runner import F32, assert_close, count_macs, random_array, run_onnx_node, type_error

from ember.errors import ShapeError
from ember.graph.ir import NoAttrs, TensorType
from ember.graph.ops import evaluate
from ember.graph.ops.attrs import ConvAttrs
from ember.graph.ops.packed import (
    conv_pack_layout,
    dense_pack_layout,
    pack_conv_weight,
    pack_dense_weight,
    unpack_conv_weight,
    unpack_dense_weight,
)


@pytest.mark.parametrize("x_shape", [(3, 5), (2, 3, 5), (5,)])
def test_dense_pack_matches_dense_and_onnxruntime(x_shape: tuple[int, ...]) -> None:
    x, weight = random_array(*x_shape), random_array(8, 5)
    packed = pack_dense_weight(weight, 4)
    assert packed.shape == (2, 5, 4) and packed[1, 3, 2] == weight[1 * 4 + 2, 3]
    (ours,) = evaluate("dense_pack", [x, packed], NoAttrs())
    (dense,) = evaluate("dense", [x, weight], NoAttrs())
    np.testing.assert_array_equal(ours, dense)
    assert_close(ours, run_onnx_node("MatMul", {"x": x, "wt": np.ascontiguousarray(weight.T)}))
    types = [TensorType(x_shape, F32), TensorType((2, 5, 4), F32)]
    assert count_macs("dense_pack", types, NoAttrs()) == x.size // 5 * 8 * 5


def test_pack_and_unpack_are_inverse() -> None:
    weight = random_array(32, 3)
    for block in (1, 4, 16, 32):
        np.testing.assert_array_equal(unpack_dense_weight(pack_dense_weight(weight, block)), weight)
    assert dense_pack_layout(16) == "NK16n"
    with pytest.raises(ShapeError, match="24 output channels are not whole blocks of 16"):
        pack_dense_weight(random_array(24, 3), 16)


def test_type_errors_name_the_packed_layout() -> None:
    message = type_error(
        "dense_pack", [TensorType((2, 3), F32), TensorType((2, 4, 8), F32)], NoAttrs()
    )
    assert message.startswith(
        "dense_pack: x float32[2, 3] and weight float32[2, 4, 8] do not fit; dense_pack takes "
        "x[..., K] and a weight[N/b, K, b]"
    )
    mixed = [TensorType((2, 4), F32), TensorType((2, 4, 8), "float64")]
    assert "must share one floating-point dtype" in type_error("dense_pack", mixed, NoAttrs())


@pytest.mark.parametrize(
    ("data_shape", "kernel", "layout", "kernel_layout"),
    [((1, 6, 7, 5), (3, 3), "NHWC", "HWIO"), ((2, 9, 3), (3,), "NWC", "WIO")],
)
def test_conv_pack_matches_conv(data_shape, kernel, layout, kernel_layout) -> None:
    rank = len(kernel)
    x, weight = random_array(*data_shape), random_array(*kernel, data_shape[-1], 16)
    attrs = ConvAttrs((1,) * rank, (1,) * 2 * rank, (1,) * rank, 1, layout, kernel_layout)
    packed = pack_conv_weight(weight, 8)
    assert packed.shape == (2, *kernel, data_shape[-1], 8)
    assert packed[(1, *([0] * rank), 2, 3)] == weight[(*([0] * rank), 2, 8 + 3)]
    np.testing.assert_array_equal(unpack_conv_weight(packed), weight)
    (ours,) = evaluate("conv_pack", [x, packed], attrs)
    (conv,) = evaluate("conv", [x, weight], attrs)
    np.testing.assert_array_equal(ours, conv)
    types = [TensorType(x.shape, F32), TensorType(packed.shape, F32)]
    assert count_macs("conv_pack", types, attrs) == count_macs(
        "conv", [TensorType(x.shape, F32), TensorType(weight.shape, F32)], attrs
    )
    assert conv_pack_layout(8, rank) == ("OHWI8o" if rank == 2 else "OWI8o")


def test_conv_pack_type_errors() -> None:
    nchw = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NCHW", "OIHW")
    types = [TensorType((1, 4, 5, 5), F32), TensorType((1, 1, 1, 4, 8), F32)]
    assert "packs only channels-last data with an ...IO kernel layout and one group" in (
        type_error("conv_pack", types, nchw)
    )
    nhwc = ConvAttrs((1, 1), (0, 0, 0, 0), (1, 1), 1, "NHWC", "HWIO")
    wrong_rank = [TensorType((1, 5, 5, 4), F32), TensorType((1, 4, 8), F32)]
    assert "must be [O/b, *kernel, I, b] (rank 5)" in type_error("conv_pack", wrong_rank, nhwc)
    wrong_inputs = [TensorType((1, 5, 5, 4), F32), TensorType((1, 1, 1, 3, 8), F32)]
    assert "conv_pack: data has 4 channels" in type_error("conv_pack", wrong_inputs, nhwc)
    with pytest.raises(ShapeError, match="24 output channels are not whole blocks of 16"):
        pack_conv_weight(random_array(1, 1, 3, 24), 16)
