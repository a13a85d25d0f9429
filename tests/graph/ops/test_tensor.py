"""Tensor-manipulation ops: references against independent NumPy / loop computations,
type inference, and the error messages a user sees."""

from __future__ import annotations

import itertools

import numpy as np
import pytest
from onnx_node_runner import F32, type_error

from ember.errors import ResourceError, ShapeError
from ember.graph.ir import TensorType
from ember.graph.ops import OpPattern, evaluate, get_op
from ember.graph.ops.attrs import (
    AxisAttrs,
    BlockAttrs,
    PadAttrs,
    ReshapeAttrs,
    ShapeAttrs,
    SliceAttrs,
    SplitAttrs,
    TileAttrs,
    TransposeAttrs,
)

RNG = np.random.default_rng(0)


def _random(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


# -- reshape / transpose ---------------------------------------------------------


def test_reshape_keeps_row_major_order() -> None:
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    (out,) = evaluate("reshape", [x], ReshapeAttrs((4, 6)))
    assert out.shape == (4, 6)
    assert out.flatten().tolist() == list(range(24))


def test_reshape_rejects_element_count_mismatch() -> None:
    message = type_error("reshape", [TensorType((2, 3), F32)], ReshapeAttrs((4, 2)))
    assert message == "reshape: cannot reshape float32[2, 3] (6 elements) to [4, 2] (8 elements)"


def test_reshape_rejects_unresolved_minus_one() -> None:
    message = type_error("reshape", [TensorType((2, 3), F32)], ReshapeAttrs((-1, 3)))
    assert "negative dimension" in message and "-1" in message


def test_transpose_matches_einsum() -> None:
    x = _random(2, 3, 4)
    (out,) = evaluate("transpose", [x], TransposeAttrs((2, 0, 1)))
    np.testing.assert_array_equal(out, np.einsum("abc->cab", x))


def test_transpose_rejects_bad_perm() -> None:
    message = type_error("transpose", [TensorType((2, 3), F32)], TransposeAttrs((0, 0)))
    assert "perm [0, 0] is not a permutation" in message


# -- concat / split --------------------------------------------------------------


def test_concat_places_inputs_side_by_side() -> None:
    a, b, c = _random(2, 1, 3), _random(2, 4, 3), _random(2, 2, 3)
    (out,) = evaluate("concat", [a, b, c], AxisAttrs(1))
    assert out.shape == (2, 7, 3)
    np.testing.assert_array_equal(out[:, 0:1], a)
    np.testing.assert_array_equal(out[:, 1:5], b)
    np.testing.assert_array_equal(out[:, 5:7], c)


def test_concat_of_one_input_is_a_copy() -> None:
    x = _random(3)
    (out,) = evaluate("concat", [x], AxisAttrs(0))
    np.testing.assert_array_equal(out, x)


def test_concat_errors() -> None:
    message = type_error("concat", [TensorType((2, 3), F32), TensorType((3, 3), F32)], AxisAttrs(1))
    assert "must match on every axis except the concatenation axis 1" in message
    message = type_error(
        "concat", [TensorType((2, 3), F32), TensorType((2, 3), "int32")], AxisAttrs(0)
    )
    assert "dtypes differ" in message
    message = type_error("concat", [TensorType((2, 3), F32)], AxisAttrs(-1))
    assert "axis -1 is out of range for a rank-2 tensor" in message


def test_split_returns_consecutive_pieces() -> None:
    x = _random(3, 7)
    pieces = evaluate("split", [x], SplitAttrs(axis=1, sizes=(2, 0, 5)))
    assert [p.shape for p in pieces] == [(3, 2), (3, 0), (3, 5)]
    np.testing.assert_array_equal(pieces[0], x[:, :2])
    np.testing.assert_array_equal(pieces[2], x[:, 2:])


def test_split_rejects_sizes_that_do_not_cover_the_axis() -> None:
    message = type_error("split", [TensorType((3, 7), F32)], SplitAttrs(1, (2, 2)))
    assert message == (
        "split: sizes [2, 2] must be non-negative and add up to 7, "
        "the extent of axis 1 of float32[3, 7]"
    )


# -- slice -----------------------------------------------------------------------


@pytest.mark.parametrize(
    ("begin", "end", "step", "python_slice"),
    [
        (1, 4, 1, slice(1, 4)),
        (0, 5, 2, slice(0, 5, 2)),
        (4, -1, -1, slice(None, None, -1)),  # end -1 under a negative step: through 0
        (3, 0, -2, slice(3, 0, -2)),
        (2, 2, 1, slice(2, 2)),  # empty
        (4, 1, 1, slice(4, 1)),  # empty: begin past end
    ],
)
def test_slice_matches_python_slicing(begin: int, end: int, step: int, python_slice: slice) -> None:
    x = _random(5, 3)
    attrs = SliceAttrs(begins=(begin, 0), ends=(end, 3), steps=(step, 1))
    (out,) = evaluate("slice", [x], attrs)
    np.testing.assert_array_equal(out, x[python_slice, :])


def test_slice_every_axis_with_steps() -> None:
    x = _random(4, 5, 6)
    attrs = SliceAttrs(begins=(3, 0, 5), ends=(-1, 5, 0), steps=(-2, 3, -1))
    (out,) = evaluate("slice", [x], attrs)
    np.testing.assert_array_equal(out, x[3::-2, 0:5:3, 5:0:-1])


def test_slice_errors() -> None:
    data = TensorType((4, 5), F32)
    message = type_error("slice", [data], SliceAttrs((0, 0), (5, 5), (1, 1)))
    assert "slice: 0:5:1 on axis 0 of float32[4, 5] reads outside 0..3" in message
    message = type_error("slice", [data], SliceAttrs((0, 0), (4, 5), (1, 0)))
    assert "step of axis 1 is 0" in message
    message = type_error("slice", [data], SliceAttrs((0,), (4,), (1,)))
    assert "one entry per axis" in message


# -- gather ----------------------------------------------------------------------


def test_gather_with_negative_and_matrix_indices() -> None:
    x = _random(4, 5)
    indices = np.array([[0, -1], [3, -4]], dtype=np.int64)
    (out,) = evaluate("gather", [x, indices], AxisAttrs(1))
    assert out.shape == (4, 2, 2)
    for row, i, j in itertools.product(range(4), range(2), range(2)):
        assert out[row, i, j] == x[row, indices[i, j] % 5]


def test_gather_scalar_index_drops_the_axis() -> None:
    x = _random(4, 5)
    (out,) = evaluate("gather", [x, np.array(2, dtype=np.int32)], AxisAttrs(0))
    np.testing.assert_array_equal(out, x[2])


def test_gather_errors() -> None:
    message = type_error(
        "gather", [TensorType((4,), F32), TensorType((2,), "float32")], AxisAttrs(0)
    )
    assert "indices must be int32 or int64" in message
    with pytest.raises(ShapeError, match="index 4 is out of range for an axis of size 4"):
        evaluate("gather", [_random(4), np.array([4], dtype=np.int64)], AxisAttrs(0))


def test_gather_elements_follows_the_onnx_formula() -> None:
    x = _random(3, 4)
    indices = np.array([[0, -1], [2, 1], [3, 0]], dtype=np.int64)
    (out,) = evaluate("gather_elements", [x, indices], AxisAttrs(1))
    for i, j in itertools.product(range(3), range(2)):
        assert out[i, j] == x[i, indices[i, j] % 4]
    (out,) = evaluate("gather_elements", [x, indices[:2, :]], AxisAttrs(0))
    for i, j in itertools.product(range(2), range(2)):
        assert out[i, j] == x[indices[i, j] % 3, j]


# -- pad -------------------------------------------------------------------------


def test_pad_constant_value_and_shape() -> None:
    x = np.arange(6, dtype=np.float32).reshape(2, 3)
    (out,) = evaluate("pad", [x], PadAttrs(pads=(1, 0, 0, 2), value=-1.5))
    assert out.shape == (3, 5)
    np.testing.assert_array_equal(out[1:, :3], x)
    assert (out[0] == -1.5).all() and (out[:, 3:] == -1.5).all()


def test_pad_reflect_and_edge_by_hand() -> None:
    x = np.array([1, 2, 3], dtype=np.int32)
    (reflect,) = evaluate("pad", [x], PadAttrs(pads=(2, 1), mode="reflect"))
    assert reflect.tolist() == [3, 2, 1, 2, 3, 2]
    (edge,) = evaluate("pad", [x], PadAttrs(pads=(2, 1), mode="edge"))
    assert edge.tolist() == [1, 1, 1, 2, 3, 3]


def test_pad_errors() -> None:
    data = TensorType((2, 3), F32)
    assert "must be 4 non-negative numbers" in type_error("pad", [data], PadAttrs((1, 1)))
    assert "must be 4 non-negative numbers" in type_error("pad", [data], PadAttrs((0, -1, 0, 0)))
    message = type_error("pad", [data], PadAttrs((0, 3, 0, 0), mode="reflect"))
    assert "reflect padding 3 on axis 1 of float32[2, 3] must be smaller than the axis" in message
    assert "unknown mode 'wrap'" in type_error("pad", [data], PadAttrs((0, 0, 0, 0), mode="wrap"))


# -- broadcast_to / tile ---------------------------------------------------------


def test_broadcast_to_repeats_size_one_axes() -> None:
    x = _random(3, 1)
    (out,) = evaluate("broadcast_to", [x], ShapeAttrs((2, 3, 4)))
    assert out.shape == (2, 3, 4)
    for i, j, k in itertools.product(range(2), range(3), range(4)):
        assert out[i, j, k] == x[j, 0]
    assert get_op("broadcast_to").pattern == OpPattern.BROADCAST


def test_broadcast_to_error() -> None:
    message = type_error("broadcast_to", [TensorType((3, 2), F32)], ShapeAttrs((3, 4)))
    assert message.startswith("broadcast_to: float32[3, 2] cannot be broadcast to [3, 4]")
    # The target must be the result, not merely compatible: (3, 1) -> (1,) is a shrink.
    assert "cannot be broadcast" in type_error(
        "broadcast_to", [TensorType((3, 1), F32)], ShapeAttrs((1,))
    )


def test_tile_by_index_formula() -> None:
    x = _random(2, 3)
    (out,) = evaluate("tile", [x], TileAttrs((2, 3)))
    assert out.shape == (4, 9)
    for i, j in itertools.product(range(4), range(9)):
        assert out[i, j] == x[i % 2, j % 3]
    assert "one non-negative count per axis" in type_error(
        "tile", [TensorType((2, 3), F32)], TileAttrs((2,))
    )


# -- depth_to_space / space_to_depth ---------------------------------------------


def _depth_to_space_loops(x: np.ndarray, block: int, mode: str) -> np.ndarray:
    """The ONNX definition element by element (NCHW)."""
    n, c, h, w = x.shape
    depth = c // (block * block)
    out = np.zeros((n, depth, h * block, w * block), x.dtype)
    for b, d, y, z, i, j in itertools.product(
        range(n), range(depth), range(h), range(w), range(block), range(block)
    ):
        source = (i * block + j) * depth + d if mode == "DCR" else d * block * block + i * block + j
        out[b, d, y * block + i, z * block + j] = x[b, source, y, z]
    return out


@pytest.mark.parametrize("mode", ["DCR", "CRD"])
def test_depth_to_space_nchw_and_nhwc(mode: str) -> None:
    x = _random(1, 8, 2, 3)
    (out,) = evaluate("depth_to_space", [x], BlockAttrs(2, mode, "NCHW"))
    np.testing.assert_array_equal(out, _depth_to_space_loops(x, 2, mode))
    nhwc = np.transpose(x, (0, 2, 3, 1))
    (out_nhwc,) = evaluate("depth_to_space", [nhwc], BlockAttrs(2, mode, "NHWC"))
    np.testing.assert_array_equal(out_nhwc, np.transpose(out, (0, 2, 3, 1)))


def test_space_to_depth_formula_and_inverse() -> None:
    x = _random(2, 3, 4, 6)
    (out,) = evaluate("space_to_depth", [x], BlockAttrs(2))
    assert out.shape == (2, 12, 2, 3)
    for b, c, y, z, i, j in itertools.product(
        range(2), range(3), range(2), range(3), range(2), range(2)
    ):
        assert out[b, (i * 2 + j) * 3 + c, y, z] == x[b, c, y * 2 + i, z * 2 + j]
    (back,) = evaluate("depth_to_space", [out], BlockAttrs(2, "DCR"))
    np.testing.assert_array_equal(back, x)
    nhwc = np.transpose(x, (0, 2, 3, 1))
    (out_nhwc,) = evaluate("space_to_depth", [nhwc], BlockAttrs(2, layout="NHWC"))
    np.testing.assert_array_equal(out_nhwc, np.transpose(out, (0, 2, 3, 1)))


@pytest.mark.parametrize("layout", ["NCHW", "NHWC"])
def test_space_to_depth_crd_inverts_depth_to_space_crd(layout: str) -> None:
    x = _random(1, 2, 4, 6) if layout == "NCHW" else _random(1, 4, 6, 2)
    (packed,) = evaluate("space_to_depth", [x], BlockAttrs(2, "CRD", layout))
    (back,) = evaluate("depth_to_space", [packed], BlockAttrs(2, "CRD", layout))
    np.testing.assert_array_equal(back, x)


def test_block_op_errors() -> None:
    data = TensorType((1, 6, 4, 4), F32)
    message = type_error("depth_to_space", [data], BlockAttrs(2))
    assert message == "depth_to_space: channels of float32[1, 6, 4, 4] are not divisible by 2*2"
    message = type_error("space_to_depth", [TensorType((1, 2, 3, 4), F32)], BlockAttrs(2))
    assert "height and width of float32[1, 2, 3, 4] are not divisible by 2" in message
    message = type_error("space_to_depth", [data], BlockAttrs(2, mode="RCD"))
    assert "mode 'RCD' is not supported" in message
    assert "layout 'NCDHW'" in type_error("depth_to_space", [data], BlockAttrs(2, layout="NCDHW"))


# -- registry --------------------------------------------------------------------


@pytest.mark.parametrize(
    "name",
    [
        "reshape",
        "transpose",
        "concat",
        "split",
        "slice",
        "gather",
        "gather_elements",
        "pad",
        "tile",
        "depth_to_space",
        "space_to_depth",
    ],
)
def test_data_movement_ops_are_injective_and_free(name: str) -> None:
    opdef = get_op(name)
    assert opdef.pattern == OpPattern.INJECTIVE
    assert opdef.macs([TensorType((4,), F32)], [TensorType((4,), F32)], None) == 0


def test_an_empty_result_numpy_cannot_index_is_a_resource_error() -> None:
    # Found by atheris: tiling a [2, 1, 0] tensor by 1.3e18 x 7.2e17 is empty, but NumPy
    # multiplies the other dimensions and refused in a reshape, with a ValueError.
    x = np.zeros((2, 1, 0), np.float32)
    with pytest.raises(ResourceError, match="than NumPy can index, empty or not"):
        evaluate("tile", [x], TileAttrs((1331096307718291458, 723973435739343378, 5)))
    (small,) = evaluate("tile", [x], TileAttrs((3, 2, 5)))
    assert small.shape == (6, 2, 0)
