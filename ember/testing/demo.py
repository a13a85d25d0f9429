"""`make demo`: compile two networks with Ember, run them, and classify a photo.

Runs the commands a user types, printing each one first:

1. `ember info resnet-18`: what a network holds (inputs, outputs, ops, FLOPs);
2. the pretrained EfficientNet-Lite0 of `examples/classify` on its photo of a cat:
   preprocess the photo into an `.npz`, `ember compile` the committed ONNX model,
   `ember run --print-time --print-top 5 --labels ...`;
3. the built-in ResNet-18 in NHWC (seeded random weights, so its classes mean
   nothing): `ember compile resnet-18 --layout NHWC`, `ember run --print-time`;

then says where the artifacts are. Needs the repository checkout (the example's model,
photo and labels) and Pillow (`pip install -e '.[examples]'`).
"""

from __future__ import annotations

import argparse
import importlib.util
import shlex
import time
from collections.abc import Callable, Sequence
from pathlib import Path

from rich.console import Console

from ember.cli import main as ember_main
from ember.config import cache_dir
from ember.errors import EmberError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "classify"


def _shown(path: Path) -> str:
    """A path as short as the user would type it from the current directory."""
    try:
        return str(path.resolve().relative_to(Path.cwd()))
    except ValueError:
        return str(path)


class _Steps:
    def __init__(self, console: Console) -> None:
        self.console = console
        self.times: list[tuple[str, float]] = []

    def run(
        self,
        title: str,
        argv: Sequence[str | Path],
        call: Callable[[list[str]], int],
        program: int = 1,
    ) -> None:
        """Show `argv` as a command line, then `call` it without its first `program`
        words (the program's name)."""
        args = [_shown(a) if isinstance(a, Path) else a for a in argv]
        self.console.rule(f"[bold]{title}")
        self.console.print(f"[bold cyan]$ {shlex.join(args)}", highlight=False)
        start = time.perf_counter()
        code = call(args[program:])
        elapsed = time.perf_counter() - start
        self.times.append((title, elapsed))
        if code != 0:
            raise EmberError(f"`{shlex.join(args)}` failed with exit code {code}")
        self.console.print(f"[dim]({elapsed:.1f} s)")

    def ember(self, title: str, *argv: str | Path) -> None:
        self.run(title, ["ember", *argv], ember_main)


def _preprocess_main() -> Callable[[list[str]], int]:
    path = EXAMPLE / "preprocess.py"
    spec = importlib.util.spec_from_file_location("classify_preprocess", path)
    if spec is None or spec.loader is None:
        raise EmberError(f"cannot load {path}")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    main: Callable[[list[str]], int] = module.main
    return main


def _run_demo(
    steps: _Steps,
    args: argparse.Namespace,
    model: Path,
    photo_npz: Path,
    effnet: Path,
    resnet: Path,
) -> None:
    """The commands of the demo, in order (see the module docstring)."""
    timing = ["--print-time", "--repeat", str(args.repeat)]
    steps.ember("What a network holds", "info", "resnet-18")
    steps.run(
        "A photo of a cat as EfficientNet-Lite0's input",
        ["python", EXAMPLE / "preprocess.py", EXAMPLE / "chelsea.png", "-o", photo_npz],
        _preprocess_main(),
        program=2,
    )
    steps.ember("Compile the pretrained EfficientNet-Lite0 (ONNX)",
                "compile", model, "--target", args.target, "-o", effnet)  # fmt: skip
    steps.ember(
        "Run it on the photo: the top-5 classes",
        "run", effnet, "--inputs", photo_npz, "-o", photo_npz.with_name("chelsea_predictions.npz"),
        *timing, "--print-top", "5", "--labels", EXAMPLE / "imagenet_labels.txt",
    )  # fmt: skip
    steps.ember(
        "Compile the built-in ResNet-18, NHWC (random weights)",
        "compile", "resnet-18", "--layout", "NHWC", "--target", args.target, "-o", resnet,
    )  # fmt: skip
    steps.ember(
        "Run it on random input (random weights: meaningless classes)",
        "run", resnet, "--fill-mode", "random", *timing, "--print-top", "5",
    )  # fmt: skip


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--out",
        type=Path,
        default=REPO / "build" / "demo",
        help="where the artifacts go (default: build/demo in the repository)",
    )
    parser.add_argument("--target", default="llvm", help="the Target to compile for")
    parser.add_argument("--repeat", type=int, default=10, help="timed runs per network")
    args = parser.parse_args(argv)
    console = Console()

    model = EXAMPLE / "efficientnet_lite0.onnx"
    if not model.exists():
        console.print(f"[red]{model} is missing: the demo runs from a checkout of the repository")
        return 2
    out: Path = args.out
    out.mkdir(parents=True, exist_ok=True)
    photo_npz = out / "chelsea.npz"
    effnet = out / "efficientnet_lite0.tar"
    resnet = out / "resnet-18.tar"
    steps = _Steps(console)
    start = time.perf_counter()
    try:
        _run_demo(steps, args, model, photo_npz, effnet, resnet)
    except EmberError as error:
        console.print(f"[red]demo failed: {error}")
        return 1

    console.rule("[bold]Done")
    for title, seconds in steps.times:
        console.print(f"  {seconds:6.1f} s  {title}", highlight=False)
    console.print(f"  {time.perf_counter() - start:6.1f} s  in all", highlight=False)
    console.print("Artifacts (mod.so + mod.json + mod.params in each .tar):")
    for path in (effnet, resnet, photo_npz, out / "chelsea_predictions.npz"):
        console.print(f"  {_shown(path)}", highlight=False)
    console.print(f"Compiled kernels are cached in {cache_dir()} (EMBER_CACHE_DIR).")
    console.print(f"Try your own photo: examples/classify/classify.sh PHOTO {_shown(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
