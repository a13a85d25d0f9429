"""Public names of a package that import on first use, so that importing the package
loads nothing else: a helper process or a board's server that needs one module of it
does not pay for (or need) the rest.

    _NAMES = {"load": "ember.runtime.artifact", ...}     # public name -> its module
    __getattr__ = lazy_exports(__name__, _NAMES)

Standard library only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable, Mapping


def lazy_exports(package: str, names: Mapping[str, str]) -> Callable[[str], object]:
    """A module `__getattr__` for `package` that imports each of `names` from its
    module on first use (and keeps it, so the next use is a plain attribute)."""

    def __getattr__(name: str) -> object:
        if name in names:
            value = getattr(importlib.import_module(names[name]), name)
            setattr(sys.modules[package], name, value)
            return value
        raise AttributeError(f"module {package!r} has no attribute {name!r}")

    return __getattr__
