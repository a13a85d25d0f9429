"""`python -m ember.testing.fuzz`: fuzz, replay one model, or (started by the runner)
serve as the helper process."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from pathlib import Path

from ember.errors import EmberError
from ember.testing.fuzz.campaign import fuzz, summary
from ember.testing.fuzz.check import StageLog, check_case
from ember.testing.fuzz.mutations import Case
from ember.testing.fuzz.runner import WORKER_FLAG, classify_error, quiet


def replay(path: Path, feed_seed: int, fix_shapes: bool, build: bool) -> int:
    """Check one model in this process: what Ember raises propagates with its traceback."""
    case = Case(0, path.stem, path.read_bytes(), (), fix_shapes, build, feed_seed)
    quiet()
    log = StageLog()
    try:
        verdict = check_case(case, log)
    except EmberError as error:
        print(f"stage {log.stage}: {type(error).__name__}: {error}")
        return 1 if classify_error(error, log).outcome != "rejected" else 0
    print(f"{verdict.outcome} (checked: {', '.join(log.checked)}) {verdict.message}")
    return 0 if verdict.outcome == "ok" else 1


def main(argv: Sequence[str] | None = None) -> int:
    parser = argparse.ArgumentParser(
        prog="python -m ember.testing.fuzz",
        description="Fuzz Ember with mutated ONNX models (see the module docstring).",
    )
    parser.add_argument(
        "--minutes", type=float, help="wall-time budget (default 5 without --cases)"
    )
    parser.add_argument("--seed", type=int, default=0, help="the run's seed (0)")
    parser.add_argument("--cases", type=int, help="stop after this many cases")
    parser.add_argument("--out", type=Path, help="write each distinct finding here")
    parser.add_argument("--timeout", type=float, default=20.0, help="seconds per case (20)")
    parser.add_argument("--build-fraction", type=float, default=1.0,
                        help="share of the cases also built and run compiled (1)")  # fmt: skip
    parser.add_argument("--replay", type=Path, help="check one .onnx file here and exit")
    parser.add_argument("--feed-seed", type=int, default=0, help="--replay's input seed")
    parser.add_argument("--no-shapes", action="store_true", help="--replay without shapes=")
    parser.add_argument("--no-build", action="store_true", help="--replay without building")
    args = parser.parse_args(argv)
    if args.replay is not None:
        return replay(args.replay, args.feed_seed, not args.no_shapes, not args.no_build)
    minutes = args.minutes if args.minutes is not None or args.cases is not None else 5.0
    result = fuzz(args.seed, args.cases, minutes, args.timeout, args.out,
                  build_fraction=args.build_fraction,
                  progress=lambda line: print(line, file=sys.stderr, flush=True))  # fmt: skip
    print(summary(result))
    if args.out is not None and result.findings:
        print(f"\nfindings written to {args.out}")
    return 1 if result.findings else 0


if __name__ == "__main__":
    if sys.argv[4:] == [WORKER_FLAG]:  # started by CaseRunner: serve its requests
        from ember.autoschedule.worker import serve
        from ember.testing.fuzz.runner import handle_request  # not __main__'s: it pickles

        serve(handle_request)
    else:
        sys.exit(main())
