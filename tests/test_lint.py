"""ruff and mypy over `ember/`: lint or type errors fail the suite."""

from __future__ import annotations

import shutil
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


@pytest.mark.skipif(
    shutil.which("ruff") is None and not Path(sys.prefix, "bin", "ruff").exists(),
    reason="ruff is not installed (install the test extras)",
)
def test_ruff_lint() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", "ember", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run(sys.executable, "-m", "ruff", "format", "--check", "ember", "tests")
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr
