"""ruff (lint and format) over all Python in the repository and mypy over `ember/`:
lint or type errors fail the suite."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent


def _run(*command: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, cwd=ROOT, capture_output=True, text=True, check=False)


# Everything Python in the repository; mypy checks the package (pyproject's config).
LINTED = ("ember", "tests", "examples", "benchmarks")


def test_ruff_lint() -> None:
    result = _run(sys.executable, "-m", "ruff", "check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_ruff_format() -> None:
    result = _run(sys.executable, "-m", "ruff", "format", "--check", *LINTED)
    assert result.returncode == 0, result.stdout + result.stderr


def test_mypy() -> None:
    result = _run(sys.executable, "-m", "mypy")
    assert result.returncode == 0, result.stdout + result.stderr
