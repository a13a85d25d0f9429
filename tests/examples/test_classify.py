"""examples/classify: the pretrained EfficientNet-Lite0 on a real photo, end to end.

The photo goes through the example's preprocess.py, the committed ONNX model through
`ember compile` and `ember run`, exactly as the example's README tells a user; the
top-1 class must be a cat and Ember's probabilities must equal ONNX Runtime's on the
same input file. The export script's ONNX rewrites (constant folding, float16 weight
storage) are checked on a small model, since the export itself needs torch and the
pretrained-weights packages.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import numpy as np
import onnx
import pytest
from onnx import TensorProto, helper, numpy_helper

from ember.testing.oracle import ATOL, RTOL, run_onnxruntime

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "classify"
MODEL = EXAMPLE / "efficientnet_lite0.onnx"
PHOTO = EXAMPLE / "chelsea.png"
LABELS = EXAMPLE / "imagenet_labels.txt"
# ImageNet-1k's domestic cats: tabby, tiger cat, Persian, Siamese, Egyptian cat.
CAT_CLASSES = range(281, 286)


def _load(name: str) -> ModuleType:
    spec = importlib.util.spec_from_file_location(f"classify_{name}", EXAMPLE / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _ember(*args: str | Path) -> subprocess.CompletedProcess[str]:
    """The `ember` command, as a user runs it."""
    command = [sys.executable, "-m", "ember.cli", *map(str, args)]
    done = subprocess.run(command, capture_output=True, text=True, timeout=900)
    assert done.returncode == 0, f"{' '.join(command)}\n{done.stdout}\n{done.stderr}"
    return done


@pytest.fixture(scope="module")
def photo_input(tmp_path_factory: pytest.TempPathFactory) -> Path:
    pytest.importorskip("PIL", reason="the example's preprocessing needs Pillow")
    path = tmp_path_factory.mktemp("classify") / "chelsea.npz"
    assert _load("preprocess").main([str(PHOTO), "-o", str(path)]) == 0
    return path


@pytest.fixture(scope="module")
def ember_run(photo_input: Path) -> tuple[np.ndarray, str]:
    """Compile the committed model and run it on the photo: (probabilities, stdout)."""
    out = photo_input.parent
    artifact = out / "efficientnet_lite0.tar"
    _ember("compile", MODEL, "--target", "llvm", "-o", artifact)
    predictions = out / "predictions.npz"
    done = _ember(
        "run", artifact, "--inputs", photo_input, "-o", predictions,
        "--print-top", "5", "--labels", LABELS,
    )  # fmt: skip
    with np.load(predictions) as saved:
        assert len(saved.files) == 1, saved.files
        probabilities = saved[saved.files[0]]
    return probabilities, done.stdout


def test_committed_files() -> None:
    assert MODEL.stat().st_size < 20 * 2**20
    labels = LABELS.read_text().splitlines()
    assert len(labels) == 1000 and all(labels)
    assert labels[281] == "tabby, tabby cat" and labels[285] == "Egyptian cat"
    model = onnx.load(str(MODEL))
    onnx.checker.check_model(model)
    assert [i.name for i in model.graph.input] == ["images"]
    assert [o.name for o in model.graph.output] == ["probabilities"]
    # Weights are stored as float16 and widened by Cast nodes inside the model, so
    # every runtime computes in float32 from the same (exactly widened) numbers.
    halves = {i.name for i in model.graph.initializer if i.data_type == TensorProto.FLOAT16}
    widened = {n.input[0] for n in model.graph.node if n.op_type == "Cast"}
    assert len(halves) == 100 and halves <= widened


def test_preprocess_layout_and_range(photo_input: Path) -> None:
    with np.load(photo_input) as saved:
        assert saved.files == ["images"]
        x = saved["images"]
    assert x.shape == (1, 3, 224, 224) and x.dtype == np.float32
    # (pixel - 127) / 128 for pixels in 0..255.
    assert -127 / 128 <= x.min() < -0.5 and 0.5 < x.max() <= 1.0


def test_top1_is_a_cat(ember_run: tuple[np.ndarray, str]) -> None:
    probabilities, stdout = ember_run
    assert probabilities.shape == (1, 1000)
    top1 = int(probabilities[0].argmax())
    assert top1 in CAT_CLASSES, f"top-1 class {top1} is not a cat"
    assert probabilities[0].sum() == pytest.approx(1.0, abs=1e-5)
    # `--print-top 5 --labels` names the classes.
    label = LABELS.read_text().splitlines()[top1]
    assert label in stdout, stdout


def test_probabilities_equal_onnxruntime(
    ember_run: tuple[np.ndarray, str], photo_input: Path
) -> None:
    probabilities, _ = ember_run
    with np.load(photo_input) as saved:
        expected = run_onnxruntime(onnx.load(str(MODEL)), {"images": saved["images"]})
    np.testing.assert_allclose(probabilities, expected["probabilities"], rtol=RTOL, atol=ATOL)
    assert probabilities[0].argsort()[-5:].tolist() == (
        expected["probabilities"][0].argsort()[-5:].tolist()
    )


def _padded_conv_model() -> onnx.ModelProto:
    """A conv whose padding is computed by a constant subgraph, as torch exports it."""
    rng = np.random.default_rng(0)
    weight = rng.standard_normal((8, 3, 3, 3)).astype(np.float32)
    nodes = [
        helper.make_node("Constant", [], ["half"], value=numpy_helper.from_array(
            np.array([0, 0, 1, 1], np.int64))),
        helper.make_node("Concat", ["zeros", "half"], ["pads"], axis=0),
        helper.make_node("Pad", ["x", "pads"], ["padded"]),
        helper.make_node("Conv", ["padded", "w"], ["y"], strides=[2, 2]),
        helper.make_node("Softmax", ["y"], ["p"], axis=1),
    ]  # fmt: skip
    graph = helper.make_graph(
        nodes,
        "padded_conv",
        [helper.make_tensor_value_info("x", TensorProto.FLOAT, [1, 3, 9, 9])],
        [helper.make_tensor_value_info("p", TensorProto.FLOAT, [1, 8, 4, 4])],
        initializer=[
            numpy_helper.from_array(np.zeros(4, np.int64), "zeros"),
            numpy_helper.from_array(weight, "w"),
        ],
    )
    return helper.make_model(graph, opset_imports=[helper.make_opsetid("", 17)])


def test_export_rewrites_keep_the_network() -> None:
    export = _load("export_model")
    model = _padded_conv_model()
    x = np.random.default_rng(1).standard_normal((1, 3, 9, 9)).astype(np.float32)
    expected = run_onnxruntime(model, {"x": x})["p"]

    folded = export.fold_constant_subgraphs(onnx.ModelProto.FromString(model.SerializeToString()))
    assert [n.op_type for n in folded.graph.node] == ["Pad", "Conv", "Softmax"]
    np.testing.assert_allclose(run_onnxruntime(folded, {"x": x})["p"], expected, RTOL, ATOL)

    halved = export.store_weights_fp16(folded)
    onnx.checker.check_model(halved, full_check=True)
    assert [n.op_type for n in halved.graph.node] == ["Cast", "Pad", "Conv", "Softmax"]
    stored = {i.name: numpy_helper.to_array(i) for i in halved.graph.initializer}
    assert stored["w_fp16"].dtype == np.float16 and stored["pads"].dtype == np.int64
    # The half-precision model is the float32 network with rounded weights.
    rounded = onnx.ModelProto.FromString(model.SerializeToString())
    w = next(i for i in rounded.graph.initializer if i.name == "w")
    w.CopyFrom(numpy_helper.from_array(stored["w_fp16"].astype(np.float32), "w"))
    np.testing.assert_allclose(
        run_onnxruntime(halved, {"x": x})["p"], run_onnxruntime(rounded, {"x": x})["p"], 0, 0
    )
