"""dense_pack: its reference equals dense on the unpacked weight (and ONNX Runtime's
MatMul), the pack/unpack helpers are inverse, MAC counts, and type-inference errors."""

from __future__ import annotations

import numpy as np
import pytest
from onnx_node_runner import F32, assert_close, count_macs, random_array, run_onnx_node, type_error

from ember.errors import ShapeError
from ember.graph.ir import NoAttrs, TensorType
from ember.graph.ops import evaluate
from ember.graph.ops.packed import dense_pack_layout, pack_dense_weight, unpack_dense_weight


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
