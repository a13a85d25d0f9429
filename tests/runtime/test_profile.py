"""The per-step profile's rows and table, from given step times (no library): matching
steps to mod.json's groups, shares, GFLOP/s, sorting, totals."""

from __future__ import annotations

import pytest

from ember.runtime.profile import GroupInfo, Profile

GROUPS = (
    GroupInfo("conv_add_relu", "anchor", "conv_add_relu_0a", '["k1"]', 2_000_000),
    GroupInfo("transpose", "injective", "transpose_1b", '["k2"]', None),
    GroupInfo("topk", "opaque", "ember_topk_float32", None, None),
)


def profile() -> Profile:
    return Profile.from_steps(
        names=["conv_add_relu", "transpose", "topk_node", "output 1"],
        kernels=["conv_add_relu_0a_packed", "transpose_1b_packed", "ember_topk_float32", "memcpy"],
        seconds=[0.002, 0.001, 0.0005, 0.0005],
        groups=GROUPS,
        repeat=7,
    )


def test_rows_are_matched_to_groups_by_position_then_name() -> None:
    rows = profile().rows
    assert [(row.group, row.kernel) for row in rows] == [
        ("conv_add_relu", "conv_add_relu_0a"),
        ("transpose", "transpose_1b"),
        ("topk_node", "ember_topk_float32"),  # not the group's name: the C step's
        ("output 1", "memcpy"),
    ]
    assert [row.share for row in rows] == pytest.approx([0.5, 0.25, 0.125, 0.125])
    assert rows[0].gflops == pytest.approx(1.0)  # 2 MFLOP in 2 ms
    assert [row.gflops for row in rows[1:]] == [None, None, None]


def test_table_is_sorted_slowest_first_with_totals() -> None:
    assert str(profile()).splitlines() == [
        "Per-step profile: 4 steps, median of 7 runs each",
        "rank  step  time (ms)   share   cumul   GFLOP/s  group          kernel",
        "   1     0     2.0000   50.0%   50.0%       1.0  conv_add_relu  conv_add_relu_0a",
        "   2     1     1.0000   25.0%   75.0%         -  transpose      transpose_1b",
        "   3     2     0.5000   12.5%   87.5%         -  topk_node      ember_topk_float32",
        "   4     3     0.5000   12.5%  100.0%         -  output 1       memcpy",
        "total          4.0000  100.0%               0.5  4 steps  (0.002 GFLOP)",
    ]


def test_table_top_sums_the_rest() -> None:
    lines = profile().format(top=1).splitlines()
    assert lines[3].split() == ["2.0000", "50.0%", "(3", "more", "steps)"]
    assert lines[-1].startswith("total")


def test_groups_from_metadata() -> None:
    entry = {"name": "g", "kind": "anchor", "kernel": "k", "workload_key": "[]", "flops": 12}
    assert GroupInfo.list_from_metadata({"groups": [entry]}) == (
        GroupInfo("g", "anchor", "k", "[]", 12),
    )
    # Only the profile reads them: damaged or missing groups are none, not an error.
    assert GroupInfo.list_from_metadata({}) == ()
    assert GroupInfo.list_from_metadata({"groups": 5}) == ()
    assert GroupInfo.list_from_metadata({"groups": [entry, {"name": "g"}]}) == ()
    assert GroupInfo.list_from_metadata({"groups": [{**entry, "flops": "many"}]}) == ()


def test_steps_without_groups_keep_the_librarys_names() -> None:
    rows = Profile.from_steps(["a", "b"], ["a_packed", "memcpy"], [0.001, 0.003], (), 1).rows
    assert [(row.group, row.kernel, row.flops, row.share) for row in rows] == [
        ("a", "a_packed", None, 0.25),
        ("b", "memcpy", None, 0.75),
    ]
