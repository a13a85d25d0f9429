"""ONNX tensor-manipulation converters against ONNX Runtime, across opsets."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given
from hypothesis import strategies as st
from onnx import TensorProto, helper, numpy_helper
from onnx_models import check_one_node, onnx_model

from ember.errors import ModelLoadError, ShapeError, UnsupportedOperatorError
from ember.frontend import from_onnx
from ember.frontend.onnx.tensor import clamp_slice
from ember.graph.ops import evaluate
from ember.graph.ops.attrs import SliceAttrs
from ember.testing.oracle import check_against_onnxruntime

RNG = np.random.default_rng(2)
INT64_MAX = np.iinfo(np.int64).max
INT64_MIN = np.iinfo(np.int64).min
FLOAT = TensorProto.FLOAT


def _random(*shape: int) -> np.ndarray:
    return RNG.standard_normal(shape).astype(np.float32)


def _ints(*values: int) -> np.ndarray:
    return np.array(values, dtype=np.int64)


# -- reshape family --------------------------------------------------------------


@pytest.mark.parametrize("target", [(0, -1), (-1, 4), (0, 2, 2, 5), (40,)])
def test_reshape_zero_and_minus_one(target: tuple[int, ...]) -> None:
    check_one_node("Reshape", _random(2, 4, 5), 13, {"shape": _ints(*target)})


def test_reshape_allowzero_keeps_a_literal_zero() -> None:
    check_one_node("Reshape", _random(0, 3), 14, {"shape": _ints(3, 0)}, allowzero=1)


@pytest.mark.parametrize("axis", [0, 1, 2, 3, -1])
def test_flatten(axis: int) -> None:
    check_one_node("Flatten", _random(2, 3, 4), 13, axis=axis)


@pytest.mark.parametrize("opset", [11, 13])
def test_squeeze_and_unsqueeze_attribute_then_input(opset: int) -> None:
    x = _random(1, 3, 1, 2)
    if opset < 13:
        check_one_node("Squeeze", x, opset, axes=[0, -2])
        check_one_node("Unsqueeze", x, opset, axes=[-1, 1])
    else:
        check_one_node("Squeeze", x, opset, {"axes": _ints(0, -2)})
        check_one_node("Unsqueeze", x, opset, {"axes": _ints(-1, 1)})
    check_one_node("Squeeze", x, opset)  # no axes: every size-1 axis


def test_squeeze_of_a_wide_axis_is_an_error() -> None:
    node = helper.make_node("Squeeze", ["x", "axes"], ["y"])
    model = onnx_model([node], {"x": _random(2, 3)}, {"y": (FLOAT, (2,))}, 13, {"axes": _ints(1)})
    with pytest.raises(ShapeError, match=r"axis 1 of float32\[2, 3\] has size 3"):
        from_onnx(model)


def test_reshape_needs_a_constant_shape() -> None:
    x = _random(2, 3)
    node = helper.make_node("Reshape", ["x", "s"], ["y"])
    model = onnx_model([node], {"x": x, "s": _ints(3, 2)}, {"y": (FLOAT, (3, 2))}, 13)
    with pytest.raises(UnsupportedOperatorError, match=r"input #1 \(shape\) must be a constant"):
        from_onnx(model)


# -- transpose, concat, split ----------------------------------------------------


def test_transpose_default_and_explicit() -> None:
    check_one_node("Transpose", _random(2, 3, 4), 13)
    check_one_node("Transpose", _random(2, 3, 4), 13, perm=[1, 2, 0])


def test_concat_negative_axis() -> None:
    constants = {"a": _random(2, 1), "b": _random(2, 4)}
    check_one_node("Concat", _random(2, 3), 13, constants, axis=-1)


@pytest.mark.parametrize("opset", [11, 13, 18])
def test_split_sizes_by_opset(opset: int) -> None:
    x = _random(2, 7)
    if opset < 13:
        check_one_node("Split", x, opset, outputs=3, axis=1, split=[1, 2, 4])
    else:
        check_one_node("Split", x, opset, {"split": _ints(1, 2, 4)}, outputs=3, axis=-1)
    if opset < 18:  # Split-18 needs `split` or `num_outputs`
        check_one_node("Split", _random(6, 2), opset, outputs=3)  # equal parts


def test_split_num_outputs_makes_the_last_piece_smaller() -> None:
    check_one_node("Split", _random(2, 7), 18, outputs=3, axis=1, num_outputs=3)


def test_uneven_equal_split_is_an_error() -> None:
    node = helper.make_node("Split", ["x"], ["a", "b"])
    model = onnx_model([node], {"x": _random(3)}, {"a": (FLOAT, (2,)), "b": (FLOAT, (1,))}, 13)
    with pytest.raises(ShapeError, match="cannot be split into 2 equal parts"):
        from_onnx(model)


# -- slice -----------------------------------------------------------------------

SLICES = [
    # starts, ends, axes, steps
    ((1, 0), (3, 10), (0, 1), (1, 1)),
    ((-1,), (INT64_MIN,), (1,), (-1,)),  # whole axis reversed
    ((10, -2), (-100, 1), (0, -1), (-2, -1)),  # clamped starts, negative axis
    ((-3,), (INT64_MAX,), None, None),  # axes and steps omitted
    ((2,), (2,), (0,), (1,)),  # empty
    ((-7,), (-8,), (0,), (-1,)),  # start before the axis under a negative step: index 0
]


@pytest.mark.parametrize(("starts", "ends", "axes", "steps"), SLICES)
def test_slice_inputs(
    starts: tuple[int, ...],
    ends: tuple[int, ...],
    axes: tuple[int, ...] | None,
    steps: tuple[int, ...] | None,
) -> None:
    constants = {"starts": _ints(*starts), "ends": _ints(*ends)}
    if axes is not None:
        constants["axes"] = _ints(*axes)
    if steps is not None:
        constants["steps"] = _ints(*steps)
    for opset in (10, 13):
        check_one_node("Slice", _random(5, 6), opset, constants)


@given(
    extent=st.integers(0, 6),
    start=st.integers(-9, 9),
    end=st.integers(-9, 9),
    step=st.integers(-4, 4).filter(lambda s: s != 0),
)
def test_clamped_slice_equals_python_slicing(extent: int, start: int, end: int, step: int) -> None:
    # ONNX Slice clamps like Python slicing except for one corner: under a negative step
    # a start before the first element is clamped to index 0 (Python's slice is empty
    # there). ONNX Runtime follows the ONNX text; see test_slice_inputs.
    x = np.arange(extent)
    python_start = max(start, -extent) if step < 0 else start
    begin, stop = clamp_slice(start, end, step, extent)
    (out,) = evaluate("slice", [x], SliceAttrs((begin,), (stop,), (step,)))
    assert out.tolist() == x[python_start:end:step].tolist()


def test_slice_attributes_before_opset_10() -> None:
    check_one_node("Slice", _random(5, 6), 9, starts=[-4, 1], ends=[INT64_MAX, -1], axes=[0, 1])
    check_one_node("Slice", _random(5, 6), 9, starts=[1], ends=[3])


# -- gather, shape, expand, tile -------------------------------------------------


def test_gather_negative_matrix_and_scalar_indices() -> None:
    x = _random(4, 5)
    check_one_node("Gather", x, 13, {"i": _ints(0, -1, 2, -5).reshape(2, 2)}, axis=1)
    check_one_node("Gather", x, 13, {"i": np.array(-2, dtype=np.int32)})


def test_gather_elements() -> None:
    indices = np.array([[0, -1, 2], [3, 1, 0]], dtype=np.int64)
    check_one_node("GatherElements", _random(2, 4), 13, {"i": indices}, axis=1)
    check_one_node("GatherElements", _random(4, 3), 13, {"i": indices}, axis=0)


@pytest.mark.parametrize(("opset", "bounds"), [(13, {}), (15, {"start": 1, "end": -1})])
def test_shape_is_a_static_constant(opset: int, bounds: dict[str, int]) -> None:
    outputs = check_one_node("Shape", _random(2, 3, 4), opset, **bounds)
    expected = [2, 3, 4] if not bounds else [3]
    assert outputs["y0"].tolist() == expected


def test_size() -> None:
    assert check_one_node("Size", _random(2, 3, 4), 13)["y0"] == 24


@pytest.mark.parametrize("shape", [(2, 1, 4), (1, 1), (3, 1)])
def test_expand_broadcasts_both_ways(shape: tuple[int, ...]) -> None:
    check_one_node("Expand", _random(3, 1), 13, {"shape": _ints(*shape)})


def test_tile() -> None:
    check_one_node("Tile", _random(2, 3), 13, {"repeats": _ints(2, 3)})


# -- pad -------------------------------------------------------------------------


def test_pad_attributes_opset_10() -> None:
    check_one_node("Pad", _random(2, 3), 10, pads=[1, 0, 2, 3], value=1.5)
    check_one_node("Pad", _random(2, 3), 10, pads=[1, 2, 0, 2], mode="reflect")


@pytest.mark.parametrize("mode", ["constant", "reflect", "edge"])
def test_pad_inputs_opset_11(mode: str) -> None:
    constants = {"pads": _ints(1, 2, 1, 0)}
    if mode == "constant":
        constants["value"] = np.array(-2.0, dtype=np.float32)
    check_one_node("Pad", _random(3, 4), 11, constants, mode=mode)


def test_pad_negative_pads_crop() -> None:
    check_one_node("Pad", _random(4, 5), 13, {"pads": _ints(-1, 2, 0, -3)})


def test_pad_axes_opset_18() -> None:
    constants = {
        "pads": _ints(1, 2, 0, 1),
        "value": np.array(0.5, dtype=np.float32),
        "axes": _ints(-1, 0),
    }
    check_one_node("Pad", _random(2, 3, 4), 18, constants)


def test_pad_wrap_is_unsupported() -> None:
    node = helper.make_node("Pad", ["x", "pads"], ["y"], mode="wrap")
    model = onnx_model([node], {"x": _random(3)}, ["y"], 19, {"pads": _ints(1, 1)})
    with pytest.raises(UnsupportedOperatorError, match="mode 'wrap' is not supported"):
        from_onnx(model)


# -- depth / space ---------------------------------------------------------------


@pytest.mark.parametrize(("opset", "mode"), [(11, "DCR"), (13, "CRD"), (13, "DCR")])
def test_depth_to_space(opset: int, mode: str) -> None:
    check_one_node("DepthToSpace", _random(2, 8, 2, 3), opset, blocksize=2, mode=mode)


def test_space_to_depth() -> None:
    check_one_node("SpaceToDepth", _random(1, 3, 4, 6), 13, blocksize=2)


# -- constant producers ----------------------------------------------------------


def test_constant_of_shape_and_range_fold_to_constants() -> None:
    fill = numpy_helper.from_array(np.array([7], dtype=np.int32))
    nodes = [
        helper.make_node("ConstantOfShape", ["shape"], ["filled"], value=fill),
        helper.make_node("Range", ["start", "limit", "delta"], ["steps"]),
        helper.make_node("Range", ["fstart", "flimit", "fdelta"], ["fsteps"]),
        helper.make_node("Add", ["x", "fsteps"], ["y"]),
    ]
    constants = {
        "shape": _ints(2, 3),
        "start": np.array(10, dtype=np.int64),
        "limit": np.array(1, dtype=np.int64),
        "delta": np.array(-3, dtype=np.int64),
        "fstart": np.array(0.5, dtype=np.float32),
        "flimit": np.array(2.0, dtype=np.float32),
        "fdelta": np.array(0.25, dtype=np.float32),
    }
    x = _random(6)
    model = onnx_model(nodes, {"x": x}, ["filled", "steps", "y"], 13, constants)
    outputs = check_against_onnxruntime(model, {"x": x})
    assert outputs["steps"].tolist() == [10, 7, 4]
    # The two constant outputs reach the graph outputs through identities of params.
    graph, _ = from_onnx(model)
    params = {value.name for value in graph.params}
    assert graph.op_histogram() == {"add": 1, "identity": 2}
    assert all(n.inputs[0].name in params for n in graph.nodes if n.op == "identity")


@pytest.mark.parametrize(("limit", "delta"), [(5.0, 0.0), (0.0, 0.0), (np.inf, 1.0), (np.nan, 1.0)])
def test_range_that_never_ends_is_a_model_error(limit: float, delta: float) -> None:
    node = helper.make_node("Range", ["start", "limit", "delta"], ["steps"], name="count")
    constants = {
        "start": np.array(0.0, np.float32),
        "limit": np.array(limit, np.float32),
        "delta": np.array(delta, np.float32),
    }
    model = onnx_model([node], {}, {"steps": (FLOAT, None)}, 13, constants)
    with pytest.raises(ModelLoadError, match=r"node 'count' \(Range\): .* a finite range"):
        from_onnx(model)


def test_constant_of_shape_with_a_negative_dimension_is_a_shape_error() -> None:
    node = helper.make_node("ConstantOfShape", ["shape"], ["filled"], name="fill")
    model = onnx_model([node], {}, {"filled": (FLOAT, None)}, 13, {"shape": _ints(2, -3)})
    with pytest.raises(ShapeError, match=r"node 'fill' \(ConstantOfShape\): shape \[2, -3\]"):
        from_onnx(model)


# -- folded shape arithmetic -----------------------------------------------------


def test_torch_style_flatten_folds_to_one_reshape() -> None:
    """x.view(x.size(0), -1) as torch exports it: Shape -> Gather -> Unsqueeze ->
    Concat -> Reshape. Every step but the last folds to a constant."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Unsqueeze", ["batch", "axes"], ["batch_1d"]),
        helper.make_node("Concat", ["batch_1d", "minus_one"], ["target"], axis=0),
        helper.make_node("Reshape", ["x", "target"], ["y"]),
    ]
    constants = {
        "zero": np.array(0, dtype=np.int64),
        "axes": _ints(0),
        "minus_one": _ints(-1),
    }
    x = _random(2, 3, 4)
    model = onnx_model(nodes, {"x": x}, {"y": (FLOAT, (2, 12))}, 13, constants)
    outputs = check_against_onnxruntime(model, {"x": x})
    assert outputs["y"].shape == (2, 12)
    graph, _ = from_onnx(model)
    assert graph.op_histogram() == {"reshape": 1}


def test_concat_axis_out_of_range_names_the_node() -> None:
    node = helper.make_node("Concat", ["x", "x"], ["y"], axis=2, name="join")
    model = onnx_model([node], {"x": _random(2, 3)}, {"y": (FLOAT, (2, 6))}, 13)
    with pytest.raises(ModelLoadError, match=r"node 'join' \(Concat\): axis 2 is out of range"):
        from_onnx(model)
