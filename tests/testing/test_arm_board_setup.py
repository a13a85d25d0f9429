"""Setting up an emulated board's Python (`ember.testing.arm_board`), with apt's commands
faked: the boards themselves are exercised in tests/rpc/test_arm_board.py."""

from __future__ import annotations

import os
import shutil
from pathlib import Path

import pytest

from ember.testing import arm_board
from ember.testing.arm_board import ARM64, BoardUnavailable


@pytest.fixture
def as_root_with_apt(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(os, "geteuid", lambda: 0)
    monkeypatch.setattr(shutil, "which", lambda name: f"/usr/bin/{name}")


def test_a_failed_index_update_does_not_stop_the_download(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, as_root_with_apt: None
) -> None:
    """A mirror mid-sync fails `apt-get update` for one index; the packages may still
    download from the indexes apt kept. Only when the download fails too is the board
    unavailable, and the error says both."""
    commands: list[list[str]] = []

    def fake_run(command: list[str], cwd: str | None = None) -> None:
        commands.append(command)
        if command[:2] == ["apt-get", "update"]:
            raise BoardUnavailable("`apt-get update -qq` failed: File has unexpected size")
        if command[:2] == ["apt-get", "download"]:
            assert cwd is not None
            (Path(cwd) / "python3.deb").write_bytes(b"")
        if command[:2] == ["dpkg", "-x"]:
            Path(command[3]).mkdir(parents=True, exist_ok=True)

    monkeypatch.setattr(arm_board, "_run", fake_run)
    root = tmp_path / "arm64-sysroot"
    arm_board._unpack_packages(root, ARM64)
    assert root.is_dir()
    assert [command[:2] for command in commands] == [
        ["dpkg", "--add-architecture"],
        ["apt-get", "update"],
        ["apt-get", "download"],
        ["dpkg", "-x"],
    ]

    def failing_run(command: list[str], cwd: str | None = None) -> None:
        if command[0] == "apt-get":
            raise BoardUnavailable(f"`apt-get {command[1]}` failed")

    monkeypatch.setattr(arm_board, "_run", failing_run)
    other = tmp_path / "other-sysroot"
    with pytest.raises(
        BoardUnavailable, match=r"`apt-get download` failed \(after `apt-get update` failed\)"
    ):
        arm_board._unpack_packages(other, ARM64)
    assert not other.exists()
