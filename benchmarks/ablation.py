"""Cost-model ablation from two tuning logs of the same network: how many trials the
learned model needs to reach the random model's final estimated latency.

    ember tune resnet-18 -o xgb.json --trials 2000 --cost-model xgb
    ember tune resnet-18 -o random.json --trials 2000 --cost-model random
    python benchmarks/ablation.py xgb.json random.json [-o ablation.html]

Both curves are the estimated end-to-end latency (sum of each task's best so far x its
weight) against trials, replayed from the logs (`ember.autoschedule.report`); with
`-o` they are drawn on one chart (and a PNG when matplotlib is installed).
"""

from __future__ import annotations

import argparse

from ember.autoschedule.records import load_records
from ember.autoschedule.report import (
    EstimateCurve,
    estimate_curve,
    log_report,
    write_html,
    write_png,
)


def trials_to_reach(curve: EstimateCurve, latency: float) -> int | None:
    """The first trial at which `curve` is at or below `latency` (None: never)."""
    return next((trials for trials, estimate in curve.points if estimate <= latency), None)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("learned", help="log of the run with the learned model")
    parser.add_argument("baseline", help="log of the run with the random model")
    parser.add_argument("-o", "--output", help="also write an HTML chart of both curves")
    args = parser.parse_args()
    runs = {"learned": args.learned, "random": args.baseline}
    records = {name: load_records(path) for name, path in runs.items()}
    curves = {name: estimate_curve(records[name], label=f"{name} ({runs[name]})") for name in runs}
    for name, curve in curves.items():
        final = curve.final
        shown = f"{final * 1e3:.3f} ms" if final is not None else "-"
        print(f"{name:8s} {curve.trials:5d} trials, final estimate {shown}")
    target = curves["random"].final
    if target is None:
        raise SystemExit("the random model's log never has every task measured")
    reached = trials_to_reach(curves["learned"], target)
    where = "never" if reached is None else f"after {reached} trials"
    print(f"learned model reaches the random model's final {target * 1e3:.3f} ms: {where}")
    if reached is not None:
        print(f"share of the random run's trials: {reached / curves['random'].trials:.2f}")
    if args.output:
        reports = [log_report(records[name], curves[name].label) for name in runs]
        write_html(reports, args.output)
        write_png(list(curves.values()), args.output.rsplit(".", 1)[0] + ".png")
        print(f"chart: {args.output}")


if __name__ == "__main__":
    main()
