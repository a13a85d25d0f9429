"""A fuzz run: cases one after another until a count or a time budget is reached, the
distinct findings, the report and the files written for each finding."""

from __future__ import annotations

import math
import re
import tempfile
import time
from collections import Counter
from collections.abc import Callable
from dataclasses import dataclass, field
from pathlib import Path

from ember.testing.fuzz.check import CheckFunction, check_case
from ember.testing.fuzz.mutations import Case, make_case
from ember.testing.fuzz.runner import CaseResult, CaseRunner, helper_environment

FINDINGS = ("bug", "internal_error", "mismatch_ort", "mismatch_compiled", "hang", "crash")
OUTCOMES = ("ok", "rejected", "oracle_failure", *FINDINGS)


@dataclass(slots=True)
class Finding:
    """A distinct finding: its first case and how many cases had it."""

    result: CaseResult
    case: Case
    count: int = 1


@dataclass(slots=True)
class FuzzResult:
    seed: int
    seconds: float = 0.0
    outcomes: list[str] = field(default_factory=list)  # per case, in order
    findings: dict[tuple[str, str, str], Finding] = field(default_factory=dict)
    rejected_by: Counter[str] = field(default_factory=Counter)
    checked: Counter[str] = field(default_factory=Counter)

    @property
    def counts(self) -> Counter[str]:
        return Counter(self.outcomes)

    def add(self, case: Case, result: CaseResult) -> None:
        self.outcomes.append(result.outcome)
        self.checked.update(result.checked)
        if result.outcome == "rejected":
            self.rejected_by[result.error_type] += 1
        elif result.outcome in FINDINGS:
            if result.key in self.findings:
                self.findings[result.key].count += 1
            else:
                self.findings[result.key] = Finding(result, case)


def fuzz(
    seed: int = 0,
    cases: int | None = None,
    minutes: float | None = None,
    timeout: float = 20.0,
    out: Path | str | None = None,
    check: CheckFunction = check_case,
    build_fraction: float = 1.0,
    progress: Callable[[str], None] | None = None,
    progress_every: float = 30.0,
) -> FuzzResult:
    """Run cases 0, 1, ... of run `seed` until `cases` are done or `minutes` have
    passed (at least one of them must be given); `out`: where to write the findings."""
    if cases is None and minutes is None:
        raise ValueError("fuzz needs cases= or minutes= to know when to stop")
    deadline = time.monotonic() + minutes * 60 if minutes is not None else math.inf
    result = FuzzResult(seed)
    start = last_report = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="ember-fuzz-") as scratch:
        env = helper_environment(Path(scratch) / "cache")
        runner = CaseRunner(check, timeout, Path(scratch), env)
        try:
            index = 0
            while (cases is None or index < cases) and time.monotonic() < deadline:
                case = make_case(seed, index, build_fraction)
                result.add(case, runner.run(case))
                index += 1
                result.seconds = time.monotonic() - start
                if progress is not None and time.monotonic() - last_report >= progress_every:
                    progress(progress_line(result))
                    last_report = time.monotonic()
        except KeyboardInterrupt:
            pass  # report what was found so far
        finally:
            runner.close()
    result.seconds = time.monotonic() - start
    if out is not None:
        write_findings(result, Path(out))
    return result


def progress_line(result: FuzzResult) -> str:
    counts = ", ".join(f"{name} {n}" for name, n in sorted(result.counts.items()))
    minutes, seconds = divmod(int(result.seconds), 60)
    return (f"[{minutes:3d}:{seconds:02d}] {len(result.outcomes)} cases, "
            f"{len(result.findings)} distinct findings ({counts})")  # fmt: skip


def describe(finding: Finding) -> str:
    result, case = finding.result, finding.case
    return (
        f"{result.outcome} {result.error_type} at {result.location} (x{finding.count}; "
        f"first: case {case.index}, seed model {case.seed_name}, {'; '.join(case.mutations)}): "
        f"{result.message}"
    )


def summary(result: FuzzResult) -> str:
    """The report: counts per outcome, what was checked, the distinct findings."""
    total, minutes = len(result.outcomes), result.seconds / 60
    rate = total / minutes if minutes else 0.0
    lines = [f"ember fuzz: seed {result.seed}, {total} cases in {minutes:.1f} min "
             f"({rate:.0f} cases/min)", ""]  # fmt: skip
    for outcome in OUTCOMES:
        lines.append(f"  {outcome:<18} {result.counts[outcome]:6d}")
    checked = ", ".join(f"{stage} {n}" for stage, n in result.checked.most_common())
    rejected = ", ".join(f"{kind} {n}" for kind, n in result.rejected_by.most_common())
    lines += ["", f"  cases past each check: {checked or 'none'}"]
    lines += [f"  rejected with: {rejected or 'none'}", ""]
    lines.append(f"distinct findings: {len(result.findings)}")
    for number, finding in enumerate(result.findings.values(), 1):
        lines.append(f"  {number:3d}. {describe(finding)}")
    return "\n".join(lines)


def write_findings(result: FuzzResult, out: Path) -> None:
    """Each distinct finding's first model (NNN-outcome-type.onnx) and a text file with
    its description, traceback and the command that replays it."""
    out.mkdir(parents=True, exist_ok=True)
    for number, finding in enumerate(result.findings.values(), 1):
        result_, case = finding.result, finding.case
        slug = re.sub(r"[^A-Za-z0-9_.-]+", "_", f"{result_.outcome}-{result_.error_type}")
        model = out / f"{number:03d}-{slug}.onnx"
        model.write_bytes(case.model)
        flags = [f"--feed-seed {case.feed_seed}"]
        flags += [] if case.fix_shapes else ["--no-shapes"]
        flags += [] if case.build else ["--no-build"]
        replay = f"python -m ember.testing.fuzz --replay {model} {' '.join(flags)}"
        text = (f"{describe(finding)}\n\nstage: {result_.stage}\nmutations:\n"
                + "".join(f"  {m}\n" for m in case.mutations)
                + f"\nreplay: {replay}\n\n{result_.detail}\n")  # fmt: skip
        model.with_suffix(".txt").write_text(text)
