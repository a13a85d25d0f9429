"""What the `ember` subcommands share: reading a model (an ONNX file or a built-in
workload) and the input-shape options that go with it."""

from __future__ import annotations

import argparse
import re
from pathlib import Path

from ember.errors import EmberError, UsageError
from ember.graph.ir import Graph, Params

# One `NAME:[D1,D2,...]` item of tvmc's --input-shapes form. The name is matched
# lazily up to the last ':[' so that names with colons ("input:0") survive.
_BRACKETED_ITEM = re.compile(r"([^\s;,\[\]][^\s;\[\]]*?):\[([^\]]*)\]")
_SHAPES_HELP = (
    "write NAME:[D1,D2,...] (or NAME:D1,D2,...) and separate inputs with spaces or ';', "
    "e.g. --input-shapes 'input:[1,3,224,224] mask:[1,16]'"
)


def _dims(text: str, item: str) -> tuple[int, ...]:
    try:
        dims = tuple(int(d) for d in text.split(",") if d.strip())
    except ValueError:
        raise EmberError(f"cannot read the shape entry {item!r}: {_SHAPES_HELP}") from None
    if any(d < 1 for d in dims):
        raise EmberError(f"shape entry {item!r} has a dimension below 1: {_SHAPES_HELP}")
    return dims


def _parse_bracketed(text: str) -> dict[str, tuple[int, ...]]:
    shapes: dict[str, tuple[int, ...]] = {}
    matches = list(_BRACKETED_ITEM.finditer(text))
    # Whatever the items do not cover may only be separators; anything else is a typo
    # that would otherwise vanish silently.
    leftover = _BRACKETED_ITEM.sub("", text)
    if not matches or leftover.strip(" \t\n;,"):
        raise EmberError(f"cannot read the input shapes {text!r}: {_SHAPES_HELP}")
    for match in matches:
        shapes[match.group(1)] = _dims(match.group(2), match.group(0))
    return shapes


def parse_shapes(text: str | None) -> dict[str, tuple[int, ...]] | None:
    """Input shapes from the command line, in tvmc's form or Ember's older one:
    `"data:[1,3,224,224] mask:[1,16]"` or `"data:1,3,224,224;mask:1,16"`
    -> {"data": (1, 3, 224, 224), "mask": (1, 16)}."""
    if not text or not text.strip():
        return None
    if "[" in text:
        return _parse_bracketed(text)
    shapes: dict[str, tuple[int, ...]] = {}
    # Empty items are skipped, so a trailing ';' is harmless.
    for item in filter(str.strip, text.split(";")):
        name, sep, dims = item.strip().rpartition(":")
        if not sep or not name:
            raise EmberError(f"cannot read the shape entry {item!r}: {_SHAPES_HELP}")
        shapes[name] = _dims(dims, item)
    return shapes


def _workload(
    name: str, shapes: dict[str, tuple[int, ...]] | None, batch_size: int, layout: str
) -> tuple[Graph, Params]:
    from ember.testing import get_workload

    if not shapes:
        return get_workload(name, batch_size=batch_size, layout=layout)
    # A built-in workload has one input, "data"; its shape gives the batch size and
    # the image size (in the layout's axis order, as get_workload takes it).
    unknown = sorted(set(shapes) - {"data"})
    if unknown:
        raise EmberError(
            f"built-in workload {name!r} has one input, 'data'; got shapes for {unknown}: "
            f"write --input-shapes 'data:[N,...]'"
        )
    batch, *image = shapes["data"]
    return get_workload(name, batch_size=batch, layout=layout, image_shape=tuple(image))


def load_model(
    model: str,
    shapes: dict[str, tuple[int, ...]] | None = None,
    batch_size: int = 1,
    layout: str = "NCHW",
) -> tuple[Graph, Params]:
    """A model file (ONNX `.onnx`; a PyTorch program saved by `torch.export.save`,
    `.pt2`; TFLite `.tflite`) or the name of a built-in workload (`resnet-50`, ...). For
    a workload, a shape for its input "data" sets the batch and image size."""
    from ember.frontend import from_onnx, from_pytorch, from_tflite
    from ember.testing import list_workloads

    if model in list_workloads():
        return _workload(model, shapes, batch_size, layout)
    path = Path(model)
    if path.suffix in (".pt2", ".tflite") and shapes:
        raise EmberError(
            f"{path}: the input shapes of a {path.suffix} model are fixed in the file; "
            "export it again with the shapes you want (no --input-shapes)"
        )
    if path.suffix == ".pt2":
        return from_pytorch(path)
    if path.suffix == ".tflite":
        return from_tflite(path)
    if path.exists() or path.suffix == ".onnx":
        return from_onnx(path, shapes=shapes)
    raise EmberError(
        f"{model!r} is neither an existing model file nor a built-in workload; "
        f"built-in workloads: {', '.join(list_workloads())}"
    )


def add_model_arguments(parser: argparse.ArgumentParser, default_layout: str = "NCHW") -> None:
    """MODEL plus the options that say how to read it."""
    parser.add_argument(
        "model",
        help="a model file (.onnx, .tflite, or .pt2 from torch.export.save) or a built-in "
        "workload name (resnet-50, ...)",
    )
    parser.add_argument(
        "--input-shapes",
        "--shapes",
        dest="shapes",
        metavar="SHAPES",
        help="input shapes, e.g. 'input:[1,3,224,224] mask:[1,16]': fixes symbolic "
        "dimensions of an ONNX model; for a built-in workload, 'data:[N,C,H,W]' sets "
        "the batch and image size",
    )
    parser.add_argument(
        "--batch-size", type=int, default=1, help="for built-in workloads (--input-shapes wins)"
    )
    parser.add_argument(
        "--layout",
        default=default_layout,
        choices=("NCHW", "NHWC"),
        help=f"the layout of a built-in workload's input (default {default_layout})",
    )


def format_count(value: int) -> str:
    """1234567 -> '1.23M'."""
    for unit, scale in (("G", 10**9), ("M", 10**6), ("K", 10**3)):
        if value >= scale:
            return f"{value / scale:.2f}{unit}"
    return str(value)


def format_bytes(count: int) -> str:
    """Bytes in the largest binary unit that keeps the number at or above 1."""
    for unit, scale in (("GiB", 2**30), ("MiB", 2**20), ("KiB", 2**10)):
        if count >= scale:
            return f"{count / scale:.1f} {unit}"
    return f"{count} B"


def add_rpc_arguments(parser: argparse.ArgumentParser) -> None:
    """--rpc-tracker, --rpc-key and --token-file, shared by `ember tune` and `ember run`."""
    add = parser.add_argument
    add("--rpc-tracker", metavar="HOST:PORT", help="measure on boards handed out by this tracker")
    add("--rpc-key", help="the key of the boards to use (e.g. rasp4b-64)")
    add(
        "--token-file",
        help="the device farm's shared secret (default: EMBER_RPC_TOKEN_FILE; none: the "
        "tracker must be on loopback)",
    )


def rpc_tracker_address(args: argparse.Namespace) -> tuple[str, int]:
    """--rpc-tracker as (host, port), given with the --rpc-key it needs."""
    from ember.rpc.protocol import DEFAULT_TRACKER_PORT, parse_address

    if not args.rpc_key:
        raise UsageError("--rpc-tracker needs --rpc-key: the key the boards registered under")
    return parse_address(args.rpc_tracker, DEFAULT_TRACKER_PORT)
