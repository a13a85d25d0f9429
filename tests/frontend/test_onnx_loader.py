"""The ONNX loader: reading, checking and naming; each error test asserts the message."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper
from onnx_models import graph_model

from ember.errors import ModelLoadError, ShapeError, UnsupportedOperatorError
from ember.frontend import from_onnx
from ember.frontend.onnx.registry import CONVERTERS
from ember.graph import interpret
from ember.testing.oracle import check_against_onnxruntime


def _tensor(name: str, shape: list[int | str] | None, dtype: int = TensorProto.FLOAT):
    return helper.make_tensor_value_info(name, dtype, shape)


def _relu_model(shape: list[int | str] | None = None, opset: int = 13) -> onnx.ModelProto:
    shape = [2, 3] if shape is None else shape
    return graph_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu")],
        [_tensor("x", shape)],
        [_tensor("y", shape)],
        opset=opset,
    )


# -- reading ---------------------------------------------------------------------------


def test_loads_path_bytes_and_proto_alike(tmp_path: Path) -> None:
    model = _relu_model()
    path = tmp_path / "relu.onnx"
    onnx.save(model, str(path))
    x = np.array([[-1.0, 2.0, -3.0], [4.0, -5.0, 6.0]], dtype=np.float32)
    for source in (model, model.SerializeToString(), path, str(path)):
        graph, params = from_onnx(source)
        assert [v.name for v in graph.inputs] == ["x"]
        assert [v.name for v in graph.outputs] == ["y"]
        np.testing.assert_array_equal(interpret(graph, params, {"x": x})["y"], np.maximum(x, 0))


def test_missing_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match=r"model file '.*nope\.onnx' does not exist"):
        from_onnx(tmp_path / "nope.onnx")


def test_directory_instead_of_file(tmp_path: Path) -> None:
    with pytest.raises(ModelLoadError, match="is a directory"):
        from_onnx(tmp_path)


@pytest.mark.parametrize(
    "content",
    [
        b"this is a text file, not a model\n",
        bytes(np.random.default_rng(0).integers(0, 256, 512, dtype=np.uint8)),
    ],
    ids=["text", "random-bytes"],
)
def test_not_an_onnx_file(tmp_path: Path, content: bytes) -> None:
    path = tmp_path / "model.onnx"
    path.write_bytes(content)
    with pytest.raises(
        ModelLoadError, match=r"not a readable ONNX model|does not look like an ONNX"
    ):
        from_onnx(path)


def test_truncated_file(tmp_path: Path) -> None:
    weights = helper.make_tensor("w", TensorProto.FLOAT, [64, 64], np.ones(64 * 64))
    model = graph_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [_tensor("x", [1, 64])],
        [_tensor("y", [1, 64])],
        [weights],
    )
    data = model.SerializeToString()
    path = tmp_path / "cut.onnx"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(ModelLoadError, match=r"truncated|does not look like an ONNX"):
        from_onnx(path)


def test_wrong_argument_type() -> None:
    with pytest.raises(ModelLoadError, match=r"takes a file path, bytes or an onnx\.ModelProto"):
        from_onnx(42)  # type: ignore[arg-type]


# -- opsets ----------------------------------------------------------------------------


def test_old_opset_is_rejected() -> None:
    with pytest.raises(ModelLoadError, match="opset 6; Ember imports opsets 7 to 21"):
        from_onnx(_relu_model(opset=6))


def test_opset_is_visible_to_converters() -> None:
    # Clip's bounds are attributes before opset 11 and inputs after: the loader must
    # hand the model's opset to the converter for both forms to import.
    old = graph_model(
        [helper.make_node("Clip", ["x"], ["y"], min=0.0, max=1.0)],
        [_tensor("x", [4])],
        [_tensor("y", [4])],
        opset=7,
    )
    graph, _ = from_onnx(old)
    assert [node.op for node in graph.nodes] == ["clip"]


def test_newer_opset_warns() -> None:
    newest = onnx.defs.onnx_opset_version()
    if newest <= 21:
        pytest.skip("the installed onnx knows no opset newer than 21")
    with pytest.warns(UserWarning, match="tested up to opset 21"):
        from_onnx(_relu_model(opset=22))


def test_opset_newer_than_onnx_knows_is_rejected() -> None:
    model = _relu_model()
    model.opset_import[0].version = onnx.defs.onnx_opset_version() + 5
    with pytest.raises(ModelLoadError, match="Ember imports opsets 7 to 21"):
        from_onnx(model)


# -- unsupported operators --------------------------------------------------------------


def test_all_unsupported_operators_are_listed_at_once() -> None:
    nodes = [
        helper.make_node("NonMaxSuppression", ["b", "s"], ["n1"], name="nms_1"),
        helper.make_node("Relu", ["x"], ["r"], name="relu"),
        helper.make_node("NonMaxSuppression", ["b", "s"], ["n2"], name="nms_2"),
        helper.make_node("NonMaxSuppression", ["b", "s"], ["n3"], name="nms_3"),
        helper.make_node("FusedGemm", ["x", "x"], ["g"], name="fused", domain="com.microsoft"),
    ]
    model = graph_model(
        nodes,
        [_tensor("x", [2, 2]), _tensor("b", [1, 4, 4]), _tensor("s", [1, 1, 4])],
        [_tensor("r", [2, 2]), _tensor("n3", None, TensorProto.INT64)],
    )
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    with pytest.raises(UnsupportedOperatorError) as info:
        from_onnx(model)
    assert str(info.value) == (
        "model uses 2 operator types Ember cannot import: "
        "NonMaxSuppression (x3, e.g. node 'nms_1'), "
        "com.microsoft.FusedGemm (x1, e.g. node 'fused')"
    )


def test_subgraph_operators_are_unsupported() -> None:
    branch = helper.make_graph(
        [helper.make_node("Identity", ["x"], ["out"])], "branch", [], [_tensor("out", [2])]
    )
    node = helper.make_node("If", ["c"], ["y"], name="if0", then_branch=branch, else_branch=branch)
    model = graph_model(
        [node], [_tensor("c", [], TensorProto.BOOL), _tensor("x", [2])], [_tensor("y", [2])]
    )
    with pytest.raises(UnsupportedOperatorError, match=r"If \(x1, e.g. node 'if0'\)"):
        from_onnx(model)


# -- structure ---------------------------------------------------------------------------


def test_undefined_value_is_reported() -> None:
    model = graph_model(
        [helper.make_node("Add", ["x", "ghost"], ["y"], name="add")],
        [_tensor("x", [2])],
        [_tensor("y", [2])],
    )
    with pytest.raises(ModelLoadError, match=r"node 'add' \(Add\) reads 'ghost', which no"):
        from_onnx(model)


def test_duplicate_output_is_reported() -> None:
    model = graph_model(
        [
            helper.make_node("Relu", ["x"], ["y"], name="first"),
            helper.make_node("Neg", ["x"], ["y"], name="second"),
        ],
        [_tensor("x", [2])],
        [_tensor("y", [2])],
    )
    with pytest.raises(ModelLoadError, match=r"value 'y' is defined twice .*'second'"):
        from_onnx(model)


def test_checker_failure_is_a_model_load_error() -> None:
    # Relu with an attribute it does not have: structurally fine, invalid per the spec.
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"], name="relu", bogus=3)],
        [_tensor("x", [2])],
        [_tensor("y", [2])],
    )
    with pytest.raises(ModelLoadError, match=r"node 'relu' \(Relu\) fails ONNX's own validity"):
        from_onnx(model)


# -- inputs, shapes and dtypes ------------------------------------------------------------


def test_symbolic_dim_needs_a_shape() -> None:
    with pytest.raises(ShapeError) as info:
        from_onnx(_relu_model(["batch", 3]))
    message = str(info.value)
    assert "graph input 'x' has shape [batch, 3] with unknown dimensions batch" in message
    assert "shapes={'x': (1, 3)}" in message
    assert "--shapes 'x:1,3'" in message


def test_symbolic_dim_from_shapes() -> None:
    graph, _ = from_onnx(_relu_model(["batch", 3]), shapes={"x": (5, 3)})
    assert graph.inputs[0].shape == (5, 3)
    assert graph.outputs[0].shape == (5, 3)


def test_input_without_shape_needs_a_shape() -> None:
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])], [_tensor("x", None)], [_tensor("y", None)]
    )
    with pytest.raises(ShapeError, match="graph input 'x' has no shape in the model"):
        from_onnx(model)
    graph, _ = from_onnx(model, shapes={"x": (4,)})
    assert graph.outputs[0].shape == (4,)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        (
            {"z": (1, 3)},
            r"shapes= names 'z', which is not a model input; the model's inputs are: 'x'",
        ),
        (
            {"x": (1, 3, 1)},
            r"input 'x' is \[1, 3, 1\] but the model's shape is \[batch, 3\]: .*rank 2",
        ),
        ({"x": (1, 4)}, r"input 'x' is \[1, 4\] but the model's shape is \[batch, 3\]: .*axis 1"),
        ({"x": (-1, 3)}, r"input 'x' is \[-1, 3\] .*non-negative integers"),
    ],
    ids=["unknown-name", "wrong-rank", "contradicts-fixed-dim", "negative"],
)
def test_wrong_shape_override(shapes: dict[str, tuple[int, ...]], message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        from_onnx(_relu_model(["batch", 3]), shapes=shapes)


@pytest.mark.parametrize(
    ("shapes", "message"),
    [
        ({"x": 3}, r"input 'x' is 3, not a sequence of dimensions"),
        ({"x": "1,3"}, r"input 'x' is '1,3', not a sequence of dimensions"),
        ({"x": (True, 3)}, r"input 'x' is \[True, 3\] .*non-negative integers"),
        ([("x", (1, 3))], r"shapes= must map input names to shapes.*got a list"),
    ],
    ids=["int", "string", "bool-dimension", "not-a-mapping"],
)
def test_shape_override_of_the_wrong_type(shapes: object, message: str) -> None:
    with pytest.raises(ShapeError, match=message):
        from_onnx(_relu_model(["batch", 3]), shapes=shapes)  # type: ignore[arg-type]


def test_unsupported_input_dtype() -> None:
    model = graph_model(
        [helper.make_node("Relu", ["x"], ["y"])],
        [_tensor("x", [2], TensorProto.BFLOAT16)],
        [_tensor("y", [2], TensorProto.BFLOAT16)],
    )
    with pytest.raises(UnsupportedOperatorError, match="graph input 'x' has element type BFLOAT16"):
        from_onnx(model)


def test_initializer_listed_as_input_is_a_param() -> None:
    # Models from IR version 3 and older list every initializer among the inputs.
    weights = helper.make_tensor("w", TensorProto.FLOAT, [2], [1.0, 2.0])
    model = graph_model(
        [helper.make_node("Add", ["x", "w"], ["y"])],
        [_tensor("x", [2]), _tensor("w", [2])],
        [_tensor("y", [2])],
        [weights],
    )
    graph, params = from_onnx(model)
    assert [v.name for v in graph.inputs] == ["x"]
    assert [v.name for v in graph.params] == ["w"]
    np.testing.assert_array_equal(params["w"], np.array([1.0, 2.0], np.float32))


# -- folding and output names --------------------------------------------------------------


def test_shape_subgraph_folds_to_a_constant() -> None:
    """Shape -> Gather -> Concat -> Reshape imports as one reshape with a static shape."""
    nodes = [
        helper.make_node("Shape", ["x"], ["shape"]),
        helper.make_node("Gather", ["shape", "zero"], ["batch"], axis=0),
        helper.make_node("Concat", ["batch", "minus_one"], ["new_shape"], axis=0),
        helper.make_node("Reshape", ["x", "new_shape"], ["y"]),
    ]
    initializers = [
        helper.make_tensor("zero", TensorProto.INT64, [1], [0]),
        helper.make_tensor("minus_one", TensorProto.INT64, [1], [-1]),
    ]
    model = graph_model(nodes, [_tensor("x", [2, 3, 4])], [_tensor("y", [2, 12])], initializers)
    graph, params = from_onnx(model)
    assert [node.op for node in graph.nodes] == ["reshape"]
    assert params == {}
    x = np.arange(24, dtype=np.float32).reshape(2, 3, 4)
    check_against_onnxruntime(model, {"x": x})


def test_outputs_keep_onnx_names_even_when_constant_or_inputs() -> None:
    constant = helper.make_tensor("c", TensorProto.FLOAT, [2], [7.0, 8.0])
    nodes = [
        helper.make_node("Constant", [], ["const_out"], value=constant),
        helper.make_node("Identity", ["x"], ["x_copy"]),
        helper.make_node("Relu", ["x"], ["relu_out"], name="relu"),
        helper.make_node("Identity", ["relu_out"], ["relu_again"]),
    ]
    outputs = [_tensor(n, [2]) for n in ("const_out", "x_copy", "relu_out", "relu_again", "x")]
    model = graph_model(nodes, [_tensor("x", [2])], outputs)
    graph, params = from_onnx(model)
    assert [v.name for v in graph.outputs] == [
        "const_out",
        "x_copy",
        "relu_out",
        "relu_again",
        "x",
    ]
    x = np.array([-1.0, 2.0], dtype=np.float32)
    results = interpret(graph, params, {"x": x})
    np.testing.assert_array_equal(results["const_out"], [7.0, 8.0])
    np.testing.assert_array_equal(results["x_copy"], x)
    np.testing.assert_array_equal(results["relu_again"], [0.0, 2.0])
    check_against_onnxruntime(model, {"x": x})


def _dropout_model(read_mask: bool) -> onnx.ModelProto:
    consumer = (
        helper.make_node("Cast", ["mask"], ["z"], to=TensorProto.FLOAT)
        if read_mask
        else (helper.make_node("Relu", ["y"], ["z"]))
    )
    return graph_model(
        [helper.make_node("Dropout", ["x"], ["y", "mask"], name="drop"), consumer],
        [_tensor("x", [2])],
        [_tensor("z", [2])],
    )


def test_unproduced_output_is_an_error_only_when_read(monkeypatch: pytest.MonkeyPatch) -> None:
    # A converter that leaves out an optional output (here: a stand-in for Dropout
    # without its mask): fine while nobody reads it, a clear error once something does.
    monkeypatch.setitem(CONVERTERS, "Dropout", lambda ctx, node: [node.input(0), None])
    graph, _ = from_onnx(_dropout_model(read_mask=False))
    assert [node.op for node in graph.nodes] == ["relu"]
    with pytest.raises(
        UnsupportedOperatorError,
        match=r"node 'drop' \(Dropout\): Ember's converter does not produce output #1 \('mask'\)",
    ):
        from_onnx(_dropout_model(read_mask=True))


def test_converter_errors_name_the_node() -> None:
    model = graph_model(
        [helper.make_node("Add", ["x", "y"], ["z"], name="bad_add")],
        [_tensor("x", [2]), _tensor("y", [3])],
        [_tensor("z", [2])],
    )
    with pytest.raises(ShapeError, match=r"node 'bad_add' \(Add\): .*cannot be broadcast"):
        from_onnx(model)


# -- external data and local functions -------------------------------------------------------


def _matmul_model() -> tuple[onnx.ModelProto, np.ndarray]:
    weights = np.arange(64 * 64, dtype=np.float32).reshape(64, 64) / 4096
    model = graph_model(
        [helper.make_node("MatMul", ["x", "w"], ["y"])],
        [_tensor("x", [1, 64])],
        [_tensor("y", [1, 64])],
        [onnx.numpy_helper.from_array(weights, "w")],
    )
    return model, weights


def test_external_data_is_loaded_from_beside_the_model(tmp_path: Path) -> None:
    model, weights = _matmul_model()
    path = tmp_path / "model.onnx"
    onnx.save(
        model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    _, params = from_onnx(path)
    np.testing.assert_array_equal(params["w"], weights)
    (tmp_path / "weights.bin").unlink()
    with pytest.raises(ModelLoadError, match="external data files that could not be read"):
        from_onnx(path)


def test_external_data_of_a_model_proto_must_be_loaded(tmp_path: Path) -> None:
    model, _ = _matmul_model()
    path = tmp_path / "model.onnx"
    onnx.save(
        model, str(path), save_as_external_data=True, location="weights.bin", size_threshold=0
    )
    unloaded = onnx.load(str(path), load_external_data=False)
    with pytest.raises(ModelLoadError, match=r"initializer 'w' keeps its data in the external"):
        from_onnx(unloaded)


def test_model_local_functions_are_inlined() -> None:
    body = [
        helper.make_node("Relu", ["a"], ["r"]),
        helper.make_node("Neg", ["r"], ["b"]),
    ]
    function = helper.make_function(
        "local", "NegRelu", ["a"], ["b"], body, [helper.make_opsetid("", 13)]
    )
    model = graph_model(
        [helper.make_node("NegRelu", ["x"], ["y"], domain="local")],
        [_tensor("x", [3])],
        [_tensor("y", [3])],
    )
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(function)
    graph, params = from_onnx(model)
    assert [node.op for node in graph.nodes] == ["relu", "negative"]
    x = np.array([-1.0, 0.0, 2.0], np.float32)
    np.testing.assert_array_equal(interpret(graph, params, {"x": x})["y"], [0.0, 0.0, -2.0])


# -- invalid models refused at import (issue 18) ---------------------------------------


def test_two_default_domain_opsets_are_refused() -> None:
    model = _relu_model()
    model.opset_import.append(helper.make_opsetid("ai.onnx", 17))
    with pytest.raises(ModelLoadError, match="imports the default ONNX domain 2 times"):
        from_onnx(model)


def test_a_model_without_outputs_is_refused() -> None:
    model = _relu_model()
    del model.graph.output[:]
    with pytest.raises(ModelLoadError, match="no graph outputs"):
        from_onnx(model)


@pytest.mark.parametrize("value", [2, -1])
def test_flag_attributes_outside_0_and_1_are_refused(value: int) -> None:
    model = graph_model(
        [helper.make_node("ReduceSum", ["x"], ["y"], keepdims=value)],
        [_tensor("x", [2, 3])],
        [_tensor("y", None)],
        opset=11,
    )
    with pytest.raises(ModelLoadError, match=f"'keepdims' is {value}; it is a flag"):
        from_onnx(model)


@pytest.mark.parametrize("op_type", ["And", "Or", "Xor"])
def test_logical_operators_on_floats_are_refused(op_type: str) -> None:
    model = graph_model(
        [helper.make_node(op_type, ["a", "b"], ["y"])],
        [_tensor("a", [3]), _tensor("b", [3])],
        [_tensor("y", [3], TensorProto.BOOL)],
    )
    with pytest.raises(ModelLoadError, match=f"ONNX's {op_type} takes bool tensors only"):
        from_onnx(model)


@pytest.mark.parametrize("op_type", ["Gather", "GatherElements"])
@pytest.mark.parametrize("index", [2, -3])
def test_constant_indices_out_of_range_are_refused(op_type: str, index: int) -> None:
    """Issue 18: they passed import; the interpreter raised later and the compiled
    module read a wrapped row (5 of 2 rows gave row 1)."""
    indices = helper.make_tensor("i", TensorProto.INT64, [1, 2], [0, index])
    model = graph_model(
        [helper.make_node(op_type, ["x", "i"], ["y"], axis=0)],
        [_tensor("x", [2, 2])],
        [_tensor("y", None)],
        initializers=[indices],
    )
    with pytest.raises(ModelLoadError, match=f"index {index} is out of range for axis 0 of size 2"):
        from_onnx(model)


def _calling_local_function(function: onnx.FunctionProto, call_inputs: list[str]):
    call = helper.make_node("F", call_inputs, ["y"], domain="local")
    model = graph_model([call], [_tensor("x", [2])], [_tensor("y", [2])], opset=17)
    model.opset_import.append(helper.make_opsetid("local", 1))
    model.functions.append(function)
    return model


def test_local_functions_the_inliner_refuses_are_model_load_errors() -> None:
    """Issue 18: onnx's inliner raised its ValidationError (a recursive function) and a
    bare RuntimeError (a call with more inputs than the function declares)."""
    opsets = [helper.make_opsetid("", 17), helper.make_opsetid("local", 1)]
    recursive = helper.make_function(
        "local", "F", ["a"], ["b"], [helper.make_node("F", ["a"], ["b"], domain="local")], opsets
    )
    with pytest.raises(ModelLoadError, match="cannot be inlined: Cycle detected"):
        from_onnx(_calling_local_function(recursive, ["x"]))
    relu = helper.make_function(
        "local", "F", ["a"], ["b"], [helper.make_node("Relu", ["a"], ["b"])], opsets
    )
    with pytest.raises(ModelLoadError, match="cannot be inlined: Number of actual parameters"):
        from_onnx(_calling_local_function(relu, ["x", "x"]))


def test_text_that_is_not_utf8_is_a_model_load_error() -> None:
    """Protobuf parses bytes that are not UTF-8 into string fields; reading one raised
    UnicodeDecodeError from onnx's checker (issue 18)."""
    model = graph_model(
        [helper.make_node("LeakyRelu", ["x"], ["y"], alpha=0.5)], [_tensor("x", [2])],
        [_tensor("y", [2])], opset=17,
    )  # fmt: skip
    data = model.SerializeToString().replace(b"alpha", b"al\xffha")
    with pytest.raises(ModelLoadError, match="not UTF-8"):
        from_onnx(data)


def test_ranks_beyond_32_are_refused() -> None:
    """Issue 18: broadcasting rank-33 operands raised NumPy's RuntimeError (NumPy
    broadcasts up to 32 axes); a type of higher rank is refused, naming the input."""
    model = graph_model(
        [helper.make_node("Add", ["a", "b"], ["y"])],
        [_tensor("a", [1] * 33), _tensor("b", [2] * 33)],
        [_tensor("y", None)],
    )
    with pytest.raises(ShapeError, match=r"input 'a': a tensor of rank 33 .* up to 32"):
        from_onnx(model)


def test_huge_constants_stay_nodes_instead_of_being_allocated_at_import() -> None:
    """Issue 18: ConstantOfShape of [2**20, 2**20] and Dropout's mask of a large input
    were materialised at import (MemoryError, or 4 GiB and 24 s for the mask). Results
    much larger than their inputs stay nodes (`worth_folding`); the interpreter then says
    the tensor does not fit, as a ResourceError."""
    from ember.errors import ResourceError

    fill = helper.make_tensor("v", TensorProto.FLOAT, [1], [1.0])
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [2**20, 2**20])
    model = graph_model(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], value=fill),
         helper.make_node("Add", ["x", "c"], ["y"]),
         helper.make_node("Dropout", ["y"], ["z", "mask"])],
        [_tensor("x", [1])], [_tensor("z", None), _tensor("mask", None)],
        initializers=[shape], opset=17,
    )  # fmt: skip
    graph, params = from_onnx(model)
    assert [node.op for node in graph.nodes] == ["broadcast_to", "add", "broadcast_to"]
    assert sum(array.nbytes for array in params.values()) < 16
    with pytest.raises(ResourceError, match=r"float32\[1048576, 1048576\] .* does not fit"):
        interpret(graph, params, {"x": np.ones(1, np.float32)})


def test_small_constant_of_shape_still_folds() -> None:
    fill = helper.make_tensor("v", TensorProto.INT64, [1], [7])
    shape = helper.make_tensor("s", TensorProto.INT64, [2], [2, 3])
    model = graph_model(
        [helper.make_node("ConstantOfShape", ["s"], ["c"], value=fill),
         helper.make_node("Add", ["x", "c"], ["y"])],
        [_tensor("x", [2, 3], TensorProto.INT64)], [_tensor("y", None)],
        initializers=[shape], opset=17,
    )  # fmt: skip
    graph, params = from_onnx(model)
    assert [node.op for node in graph.nodes] == ["add"]
    x = np.arange(6).reshape(2, 3)
    np.testing.assert_array_equal(interpret(graph, params, {"x": x})["y"], x + 7)


def test_a_range_too_large_to_compute_at_import_is_refused() -> None:
    scalars = [
        helper.make_tensor(n, TensorProto.FLOAT, [], [v])
        for n, v in [("a", 0.0), ("b", 1e12), ("d", 1.0)]
    ]
    model = graph_model(
        [helper.make_node("Range", ["a", "b", "d"], ["y"])], [], [_tensor("y", None)],
        initializers=scalars, opset=17,
    )  # fmt: skip
    with pytest.raises(
        ModelLoadError, match=r"a range of \d{12} elements; Ember computes Range at import"
    ):
        from_onnx(model)


# -- found by the fuzzer (python -m ember.testing.fuzz) ------------------------------


def test_opset_versions_beyond_32_bits_and_repeated_domains_are_refused() -> None:
    model = _relu_model()
    model.opset_import.append(helper.make_opsetid("com.microsoft", 2**40))
    with pytest.raises(ModelLoadError, match=r"opset 1099511627776 of domain 'com\.microsoft'"):
        from_onnx(model)  # onnx's checker raised TypeError binding it to a C int
    model = _relu_model()
    model.opset_import.extend([helper.make_opsetid("com.microsoft", 1)] * 2)
    with pytest.raises(ModelLoadError, match=r"imports domain 'com\.microsoft' 2 times"):
        from_onnx(model)


@pytest.mark.parametrize(
    ("op_type", "attribute", "value"),
    [
        ("Gemm", "alpha", float("inf")),  # scaled B: inf * 0 gave NaN where ORT gives inf
        ("LeakyRelu", "alpha", float("nan")),
        ("BatchNormalization", "epsilon", float("inf")),
    ],
)
def test_float_attributes_must_be_finite(op_type: str, attribute: str, value: float) -> None:
    inputs = {"Gemm": ["x", "x"], "LeakyRelu": ["x"]}.get(op_type, ["x", "c", "c", "c", "c"])
    model = graph_model(
        [helper.make_node(op_type, inputs, ["y"], **{attribute: value})],
        [_tensor("x", [3, 3])] if op_type != "BatchNormalization" else [_tensor("x", [1, 3])],
        [_tensor("y", None)],
        initializers=[helper.make_tensor("c", TensorProto.FLOAT, [3], [1.0, 1.0, 1.0])],
    )
    with pytest.raises(ModelLoadError, match=f"attribute '{attribute}' is {value}; it must be"):
        from_onnx(model)


def test_a_nan_clip_bound_bounds_nothing_as_in_onnx_runtime() -> None:
    """The interpreter propagated the NaN and the compiled code dropped it (fmaxf);
    ONNX Runtime ignores a NaN bound, and so does Ember now."""
    bounds = [helper.make_tensor("lo", TensorProto.FLOAT, [], [-0.5]),
              helper.make_tensor("hi", TensorProto.FLOAT, [], [float("nan")])]  # fmt: skip
    model = graph_model(
        [helper.make_node("Clip", ["x", "lo", "hi"], ["y"])],
        [_tensor("x", [2, 4])], [_tensor("y", [2, 4])], initializers=bounds,
    )  # fmt: skip
    x = np.random.default_rng(0).standard_normal((2, 4)).astype(np.float32)
    ours = check_against_onnxruntime(model, {"x": x})
    np.testing.assert_array_equal(ours["y"], np.maximum(x, -0.5))


@pytest.mark.parametrize("scale", [0.0, -0.5, float("inf"), float("nan")])
def test_quantization_scales_must_be_positive_and_finite(scale: float) -> None:
    constants = [helper.make_tensor("s", TensorProto.FLOAT, [], [scale]),
                 helper.make_tensor("z", TensorProto.UINT8, [], [128])]  # fmt: skip
    model = graph_model(
        [helper.make_node("QuantizeLinear", ["x", "s", "z"], ["y"], name="q")],
        [_tensor("x", [4])], [_tensor("y", None)], initializers=constants,
    )  # fmt: skip
    with pytest.raises(ModelLoadError, match=f"node 'q' .*: scale {scale} is not a positive"):
        from_onnx(model)


def test_batch_norm_statistics_must_be_finite() -> None:
    stats = [helper.make_tensor(n, TensorProto.FLOAT, [2], [1.0, 1.0]) for n in "bmv"]
    stats.append(helper.make_tensor("s", TensorProto.FLOAT, [2], [1.0, float("-inf")]))
    model = graph_model(
        [helper.make_node("BatchNormalization", ["x", "s", "b", "m", "v"], ["y"])],
        [_tensor("x", [1, 2, 3])], [_tensor("y", None)], initializers=stats,
    )  # fmt: skip
    with pytest.raises(ModelLoadError, match="the scale holds -inf"):
        from_onnx(model)


def test_an_ir_version_newer_than_onnx_knows_is_refused() -> None:
    model = _relu_model()
    model.ir_version = 2**38  # onnx's checker raised TypeError binding it to a C int
    with pytest.raises(ModelLoadError, match=f"has IR version {2**38}; the installed onnx"):
        from_onnx(model)


@pytest.mark.parametrize("axes", [[float("nan")], [float("inf")], [1.5]])
def test_integer_operands_written_as_floats_must_be_whole_numbers(axes: list[float]) -> None:
    """int(NaN) raised ValueError, int(inf) OverflowError, and 1.5 read as 1."""
    model = graph_model(
        [helper.make_node("ReduceSum", ["x", "a"], ["y"], name="sum")],
        [_tensor("x", [2, 3])], [_tensor("y", None)],
        initializers=[helper.make_tensor("a", TensorProto.DOUBLE, [1], axes)],
    )  # fmt: skip
    with pytest.raises(ModelLoadError, match=r"node 'sum' \(ReduceSum\): expected integers"):
        from_onnx(model)


@pytest.mark.parametrize("op_type", ["Sub", "Div", "Add", "Max"])
def test_arithmetic_on_bool_tensors_is_refused(op_type: str) -> None:
    """Sub raised NumPy's TypeError, Div disagreed between the interpreter and the
    compiled module; ONNX's arithmetic takes numbers only."""
    model = graph_model(
        [helper.make_node(op_type, ["a", "b"], ["y"])],
        [_tensor("a", [3], TensorProto.BOOL), _tensor("b", [3], TensorProto.BOOL)],
        [_tensor("y", None)],
    )
    with pytest.raises(ShapeError, match="does not take bool tensors"):
        from_onnx(model)


def test_gemm_of_a_vector_is_refused() -> None:
    """ONNX's Gemm multiplies matrices; ONNX Runtime read a vector A as one row, Ember
    as a vector (the fuzzer's shape mismatch)."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [5, 4], [0.5] * 20)
    model = graph_model(
        [helper.make_node("Gemm", ["x", "w"], ["y"], transB=1, name="fc")],
        [_tensor("x", [4])], [_tensor("y", None)], initializers=[weight],
    )  # fmt: skip
    with pytest.raises(ShapeError, match=r"node 'fc' \(Gemm\): A is float32\[4\]; Gemm multiplies"):
        from_onnx(model)


def test_gemm_checks_c_type_and_integer_scales() -> None:
    """Found by atheris: a beta of 1e30 with an int64 C overflowed while scaling C."""
    weight = helper.make_tensor("w", TensorProto.FLOAT, [3, 4], [0.5] * 12)
    model = graph_model(
        [helper.make_node("Gemm", ["x", "w", "c"], ["y"], transB=1, beta=1e30, name="fc")],
        [_tensor("x", [2, 4]), _tensor("c", [], TensorProto.INT64)], [_tensor("y", None)],
        initializers=[weight],
    )  # fmt: skip
    with pytest.raises(ShapeError, match=r"C is int64\[\] and A float32\[2, 4\]"):
        from_onnx(model)
    integer = graph_model(
        [helper.make_node("Gemm", ["a", "b"], ["y"], alpha=0.5, name="fc")],
        [_tensor("a", [2, 4], TensorProto.INT32), _tensor("b", [4, 3], TensorProto.INT32)],
        [_tensor("y", None)],
    )  # fmt: skip
    with pytest.raises(ModelLoadError, match=r"alpha=0.5 cannot scale int32 matrices"):
        from_onnx(integer)


def test_split_needs_one_size_per_output() -> None:
    """Found by atheris: a split input of 468,440 sizes for a node with one output made
    that many graph values (a 9 s import)."""
    sizes = helper.make_tensor("s", TensorProto.INT64, [3], [1, 1, 2])
    model = graph_model(
        [helper.make_node("Split", ["x", "s"], ["y"], name="cut")],
        [_tensor("x", [4])], [_tensor("y", None)], initializers=[sizes],
    )  # fmt: skip
    with pytest.raises(ShapeError, match=r"'cut' \(Split\): split gives 3 sizes for 1 output"):
        from_onnx(model)
    pieces = graph_model(
        [helper.make_node("Split", ["x"], ["a", "b"], num_outputs=3, name="cut")],
        [_tensor("x", [6])], [_tensor("a", None), _tensor("b", None)], opset=18,
    )  # fmt: skip
    with pytest.raises(ShapeError, match="num_outputs is 3, but the node has 2 output"):
        from_onnx(pieces)


def test_an_opset_domain_that_is_not_utf8_is_refused() -> None:
    model = _relu_model()
    model.opset_import.append(helper.make_opsetid("com.microsoft", 1))
    data = model.SerializeToString().replace(b"com.microsoft", b"com.microsof\xf4")
    with pytest.raises(ModelLoadError, match="a name that is not UTF-8 text"):
        from_onnx(data)
