"""`make demo`: compile two networks with Ember, run them, and classify a photo.

Runs the commands a user types, printing each one first:

1. `ember info resnet-18`: what a network holds (inputs, outputs, ops, FLOPs);
2. the pretrained EfficientNet-Lite0 of `examples/classify` on its photo of a cat:
   preprocess the photo into an `.npz`, `ember compile` the committed ONNX model,
   `ember run --print-time --print-top 5 --labels ...`;
3. the built-in ResNet-18 in NHWC (seeded random weights, so its classes mean
   nothing): `ember compile resnet-18 --layout NHWC`, `ember run --print-time`;
4. auto-tuning, briefly: `ember tune` the built-in MobileNet (NHWC, 64x64 images) for
   `--tune-trials` trials (8 per task by default, about two minutes here; 0 skips
   the step), `ember compile` it with and without `--tuning-records`, `ember run
   --print-time` both, and the two median times side by side. So short a search does
   not always beat the default schedules; `ember tune --trials` a few hundred per task
   does better;

then says where the artifacts are. Needs the repository checkout (the example's model,
photo and labels) and Pillow (`pip install -e '.[examples]'`).
"""

from __future__ import annotations

import argparse
import contextlib
import importlib.util
import io
import shlex
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TextIO

from rich.console import Console

from ember.cli import main as ember_main
from ember.config import cache_dir
from ember.errors import EmberError

REPO = Path(__file__).resolve().parents[2]
EXAMPLE = REPO / "examples" / "classify"
# The network the demo tunes: small enough that a round of every task takes minutes.
TUNE_MODEL = ["mobilenet", "--layout", "NHWC", "--input-shapes", "data:[1,64,64,3]"]
TUNE_TASKS = 22  # `ember tasks` of TUNE_MODEL
TUNE_PER_ROUND = 8


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

    def ember_output(self, title: str, *argv: str | Path) -> str:
        """`ember(...)`, also returning what the command printed."""
        copy = io.StringIO()
        with contextlib.redirect_stdout(_Tee(sys.stdout, copy)):
            self.ember(title, *argv)
        return copy.getvalue()


class _Tee(io.TextIOBase):
    """Writes to the terminal and keeps a copy."""

    def __init__(self, *streams: TextIO) -> None:
        self.streams = streams

    def write(self, text: str) -> int:
        for stream in self.streams:
            stream.write(text)
        return len(text)

    def flush(self) -> None:
        for stream in self.streams:
            stream.flush()


def median_ms(output: str) -> float:
    """The median of `ember run --print-time`'s execution time summary, in ms."""
    lines = output.splitlines()
    for index, line in enumerate(lines):
        if line.startswith("Execution time summary"):
            return float(lines[index + 2].split()[1])
    raise EmberError("`ember run --print-time` printed no execution time summary")


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


def _tune_demo(steps: _Steps, args: argparse.Namespace, out: Path) -> tuple[float, float]:
    """Step 4 (see the module docstring): the untuned and tuned median times in ms."""
    log, untuned, tuned = (out / name for name in (
        "mobilenet.records.json", "mobilenet.tar", "mobilenet.tuned.tar"))  # fmt: skip
    log.unlink(missing_ok=True)  # a fresh search each time, not a resumed one
    cost_model = [] if args.cost_model == "xgb" else ["--cost-model", args.cost_model]
    steps.ember(
        f"Tune MobileNet (NHWC, 64x64) briefly: {args.tune_trials} trials",
        "tune", *TUNE_MODEL, "--target", args.target, "--trials", str(args.tune_trials),
        "--per-round", str(TUNE_PER_ROUND), *cost_model, "-o", log,
    )  # fmt: skip
    steps.ember("Compile it with the default schedules",
                "compile", *TUNE_MODEL, "--target", args.target, "-o", untuned)  # fmt: skip
    steps.ember(
        "Compile it with the tuned schedules",
        "compile", *TUNE_MODEL, "--target", args.target, "--tuning-records", log, "-o", tuned,
    )  # fmt: skip
    timing = ["--fill-mode", "random", "--print-time", "--repeat", str(args.repeat)]
    before = median_ms(steps.ember_output("Time the untuned MobileNet", "run", untuned, *timing))
    after = median_ms(steps.ember_output("Time the tuned MobileNet", "run", tuned, *timing))
    return before, after


def _print_tuning(console: Console, times: tuple[float, float] | None, repeat: int) -> None:
    if times is None:
        return
    before, after = times
    console.print(
        f"MobileNet 64x64, median of {repeat} runs each: untuned {before:.3f} ms, "
        f"tuned {after:.3f} ms ({before / after:.2f}x)",
        highlight=False,
    )
    if after > before:
        console.print(
            "  a search this short may not beat the default schedules; "
            "`ember tune --trials` a few hundred per task does better",
            highlight=False,
        )


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
    parser.add_argument(
        "--tune-trials",
        type=int,
        default=TUNE_TASKS * TUNE_PER_ROUND,
        help="trials of the tuning step (default: one round of 8 per task; 0 skips it)",
    )
    parser.add_argument(
        "--cost-model", default="xgb", choices=("xgb", "random"), help="of the tuning step"
    )
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
    tuning: tuple[float, float] | None = None
    try:
        _run_demo(steps, args, model, photo_npz, effnet, resnet)
        if args.tune_trials > 0:
            tuning = _tune_demo(steps, args, out)
    except EmberError as error:
        console.print(f"[red]demo failed: {error}")
        return 1

    console.rule("[bold]Done")
    for title, seconds in steps.times:
        console.print(f"  {seconds:6.1f} s  {title}", highlight=False)
    console.print(f"  {time.perf_counter() - start:6.1f} s  in all", highlight=False)
    _print_tuning(console, tuning, args.repeat)
    console.print("Artifacts (mod.so + mod.json + mod.params in each .tar):")
    for path in (effnet, resnet, photo_npz, out / "chelsea_predictions.npz"):
        console.print(f"  {_shown(path)}", highlight=False)
    if tuning is not None:
        for name in ("mobilenet.tar", "mobilenet.tuned.tar", "mobilenet.records.json"):
            console.print(f"  {_shown(out / name)}", highlight=False)
    console.print(f"Compiled kernels are cached in {cache_dir()} (EMBER_CACHE_DIR).")
    console.print(f"Try your own photo: examples/classify/classify.sh PHOTO {_shown(out)}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
