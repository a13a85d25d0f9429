"""Per-step profile of a compiled network: where a run's time goes.

`Module.profile(repeat=10)` runs the network in C (`ember_profile`), reading a
monotonic clock after every step of the AOT entry point, and returns a `Profile`: one
`ProfileRow` per step in run order (each fused group's kernel call, runtime helpers,
copies to the outputs), with the median time over the repeats, its share of the
total and, where `mod.json` records the group's FLOPs, the GFLOP/s it achieved.
`str(profile)` is the table `ember run --profile` prints, slowest step first.

A step's time runs from the end of the step before it to its own end, so it includes
the call itself and, for parallel kernels, the OpenMP fork and join.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class GroupInfo:
    """One fused group of `mod.json`: what runs it, and its cost where recorded."""

    name: str
    kind: str
    kernel: str
    workload_key: str | None
    flops: int | None
    # Its kernel writes views of larger outputs (mod.json's "output_views").
    output_views: bool = False

    @staticmethod
    def list_from_metadata(metadata: Mapping[str, object]) -> tuple[GroupInfo, ...]:
        """The "groups" of `metadata`, in run order. Only the profile reads them, and
        it can do without (the library names its steps), so a missing or damaged
        entry gives none rather than an error: the module still runs."""
        entries = metadata.get("groups")
        if not isinstance(entries, list):
            return ()
        groups = []
        for entry in entries:
            try:
                flops, key = entry.get("flops"), entry.get("workload_key")
                group = GroupInfo(
                    name=str(entry["name"]),
                    kind=str(entry["kind"]),
                    kernel=str(entry["kernel"]),
                    workload_key=None if key is None else str(key),
                    flops=None if flops is None else int(flops),
                    output_views=entry.get("output_views") is True,
                )
            except (AttributeError, KeyError, TypeError, ValueError):
                return ()
            groups.append(group)
        return tuple(groups)


@dataclass(frozen=True, slots=True)
class ProfileRow:
    """One step of a run: `seconds` is its median time, `share` its fraction of the
    profile's total; `flops` is None where the build recorded none (copies,
    helpers, older artifacts)."""

    step: int
    group: str
    kernel: str
    seconds: float
    share: float
    flops: int | None

    @property
    def gflops(self) -> float | None:
        if self.flops is None or self.seconds <= 0:
            return None
        return self.flops / self.seconds * 1e-9


@dataclass(frozen=True, slots=True)
class Profile:
    """Every step of one module's run, in run order, timed over `repeat` runs."""

    rows: tuple[ProfileRow, ...]
    repeat: int

    @staticmethod
    def from_steps(
        names: Sequence[str],
        kernels: Sequence[str],
        seconds: Sequence[float],
        groups: Sequence[GroupInfo],
        repeat: int,
    ) -> Profile:
        """Rows for the library's steps, each matched to its group of `mod.json` (the
        entry point runs one step per group, in the groups' order, then the copies)."""
        total = sum(seconds)
        by_name = {group.name: group for group in groups}
        rows = []
        for step, (name, kernel, time) in enumerate(zip(names, kernels, seconds, strict=True)):
            group = groups[step] if step < len(groups) and groups[step].name == name else None
            group = group or by_name.get(name)
            rows.append(
                ProfileRow(
                    step=step,
                    group=name,
                    kernel=group.kernel if group else kernel,
                    seconds=time,
                    share=time / total if total > 0 else 0.0,
                    flops=group.flops if group else None,
                )
            )
        return Profile(tuple(rows), repeat)

    @property
    def total_seconds(self) -> float:
        return sum(row.seconds for row in self.rows)

    @property
    def total_flops(self) -> int | None:
        """FLOPs of the steps that record them; None when none does."""
        known = [row.flops for row in self.rows if row.flops is not None]
        return sum(known) if known else None

    def slowest_first(self) -> list[ProfileRow]:
        return sorted(self.rows, key=lambda row: (-row.seconds, row.step))

    def format(self, top: int | None = None) -> str:
        """The table, slowest step first (`top` of them), with the totals."""
        rows = self.slowest_first()
        shown = rows if top is None else rows[:top]
        group_width = max([len(row.group) for row in shown] + [5])
        lines = [
            f"Per-step profile: {len(self.rows)} steps, median of {self.repeat} runs each",
            f"{'rank':>4}  {'step':>4}  {'time (ms)':>9}  {'share':>6}  {'cumul':>6}  "
            f"{'GFLOP/s':>8}  {'group':<{group_width}}  kernel",
        ]
        cumulative = 0.0
        for rank, row in enumerate(shown, start=1):
            cumulative += row.share
            lines.append(
                f"{rank:>4}  {row.step:>4}  {row.seconds * 1e3:>9.4f}  {_percent(row.share)}  "
                f"{_percent(cumulative)}  {_rate(row.gflops)}  "
                f"{row.group:<{group_width}}  {row.kernel}"
            )
        if len(shown) < len(rows):
            rest = rows[len(shown) :]
            rest_seconds = sum(row.seconds for row in rest)
            share = rest_seconds / self.total_seconds if self.total_seconds > 0 else 0.0
            lines.append(
                f"{'':>4}  {'':>4}  {rest_seconds * 1e3:>9.4f}  {_percent(share)}  "
                f"{'':>6}  {'':>8}  ({len(rest)} more steps)"
            )
        total_flops = self.total_flops
        rate = None
        if total_flops is not None and self.total_seconds > 0:
            rate = total_flops / self.total_seconds * 1e-9
        flops_note = "" if total_flops is None else f"  ({total_flops * 1e-9:.3f} GFLOP)"
        lines.append(
            f"{'total':<10}  {self.total_seconds * 1e3:>9.4f}  {_percent(1.0)}  "
            f"{'':>6}  {_rate(rate)}  {len(self.rows)} steps{flops_note}"
        )
        return "\n".join(lines)

    def __str__(self) -> str:
        return self.format()


def _percent(fraction: float) -> str:
    return f"{fraction * 100:>5.1f}%"


def _rate(gflops: float | None) -> str:
    return f"{'-':>8}" if gflops is None else f"{gflops:>8.1f}"
