"""Unique names, and what a name in generated C may not be.

    names = NameSupply(taken=["x"], clean=c_identifier)
    names.fresh("x")      # "x_1": the hint itself while it is free, else the first
    names.fresh("x")      # "x_2"   free `hint_1`, `hint_2`, ...
    names.take("y")       # True: "y" claimed exactly (False if it was taken)

One supply per namespace: a graph's values and nodes (`ember.graph.ir.NameSupply`),
a kernel's buffers and loop variables (`ember.schedule.lower`), the identifiers of
rendered C (`ember.codegen.renderer.Names`), an exported ONNX model's values and
nodes (`ember.testing.to_onnx`). They differ only in how a hint is cleaned into a
legal name (`clean`) and in the names taken from the start (C keywords); the suffix
rule is this module's. Standard library only, so every level may import it.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Iterable

# C keywords and names the generated code itself uses.
_RESERVED_WORDS = """
auto break case char const continue default do double else enum extern float for
goto if inline int long register restrict return short signed sizeof static struct
switch typedef union unsigned void volatile while _Bool _Complex _Imaginary bool
true false main args num_args free memcpy aligned_alloc malloc errno NAN INFINITY
"""
C_KEYWORDS = frozenset(_RESERVED_WORDS.split())


def c_identifier(text: str) -> str:
    """`text` with every character that cannot be in a C identifier replaced by `_`."""
    return re.sub(r"[^0-9A-Za-z_]", "_", text)


def _unchanged(hint: str) -> str:
    return hint


class NameSupply:
    """Hands out names not taken yet: `clean(hint)` itself, else it with the first
    free suffix `_1`, `_2`, ... (see the module docstring)."""

    def __init__(self, taken: Iterable[str] = (), clean: Callable[[str], str] = _unchanged) -> None:
        self._taken = set(taken)
        self._clean = clean
        # Per base, the last suffix tried: every smaller one is taken already, so a
        # thousand names from one hint cost a thousand steps, not half a million.
        self._last_suffix: dict[str, int] = {}

    def __contains__(self, name: str) -> bool:
        return name in self._taken

    def take(self, name: str) -> bool:
        """Claim `name` exactly (not cleaned); False if it was taken already."""
        if name in self._taken:
            return False
        self._taken.add(name)
        return True

    def fresh(self, hint: str) -> str:
        """A name not taken before, now taken: `clean(hint)` or it with a suffix."""
        base = self._clean(hint)
        name = base
        while name in self._taken:
            self._last_suffix[base] = self._last_suffix.get(base, 0) + 1
            name = f"{base}_{self._last_suffix[base]}"
        self._taken.add(name)
        return name
