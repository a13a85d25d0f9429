"""The host compilers the compiled tests run under: gcc and, on x86-64, the clang Ember
prefers (`ember.toolchain.preferred_clang`), where installed. Ember picks one of them
(clang 19 where it can, gcc where it cannot or for code that runs elsewhere), and each
must build kernels that match the reference."""

from __future__ import annotations

import os
import shutil
from collections.abc import Iterator
from contextlib import contextmanager
from unittest import mock

from ember.target import Target
from ember.toolchain import preferred_clang


def host_compilers() -> list[str]:
    found = [name for name in ("gcc",) if shutil.which(name)]
    if Target("llvm").target_arch == "x86_64":
        clang = preferred_clang()
        found += [clang] if clang else []
    return found or ["cc"]


@contextmanager
def compiling_with(compiler: str) -> Iterator[None]:
    """Builds in the block use `compiler` ($CC; usable inside hypothesis tests, where a
    function-scoped monkeypatch is not)."""
    with mock.patch.dict(os.environ, {"CC": compiler}):
        yield
