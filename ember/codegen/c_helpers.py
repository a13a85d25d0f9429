"""Bodies of the C helper functions for operators C lacks, as NumPy computes them:
integer division and floor division/modulo (no trap on a zero divisor or INT_MIN /
-1), and floating-point floor division/modulo."""

from __future__ import annotations

from string import Template


def integer_division(op: str, t: str, signed: bool) -> str:
    """The body of C integer `div` (truncating), `floordiv` or `floormod` of a by b, of
    C type `t`, as NumPy computes them: 0 for a zero divisor, where C traps, and
    signed division by -1 wrapping INT_MIN / -1 to INT_MIN (a trap in C too). With a
    constant divisor, as in index arithmetic, the checks fold away."""
    lines = ["  if (b == 0) return 0;"]
    if signed:
        negated = "0" if op == "floormod" else f"({t})(0 - (uint64_t)a)"
        lines.append(f"  if (b == -1) return {negated};")
    lines += {
        "div": ["  return a / b;"],
        "floordiv": [
            f"  {t} q = a / b;",
            "  return (a % b != 0 && (a < 0) != (b < 0)) ? q - 1 : q;",
        ],
        "floormod": [f"  {t} r = a % b;", "  return (r != 0 && (r < 0) != (b < 0)) ? r + b : r;"],
    }[op]
    return "\n".join(lines)


# Floating-point floor division and modulo as NumPy computes them (np.floor_divide /
# np.remainder); $t: the C type, $f: the math functions' suffix.
FLOAT_FLOORMOD = """\
  $t r = fmod$f(a, b);
  if (r != 0) {
    if ((b < 0) != (r < 0)) r += b;
  } else {
    r = copysign$f(0, b);
  }
  return r;"""
FLOAT_FLOORDIV = """\
  if (b == 0) return a / b;
  $t r = fmod$f(a, b);
  $t q = (a - r) / b;
  if (r != 0 && (b < 0) != (r < 0)) q -= 1;
  if (q == 0) return copysign$f(0, a / b);
  $t f = floor$f(q);
  return q - f > ($t)0.5 ? f + 1 : f;"""


def float_floor_division(op: str, t: str, suffix: str) -> str:
    """The body of floating-point `floordiv` or `floormod` of C type `t` whose math
    functions take `suffix` ("f" for float)."""
    template = FLOAT_FLOORDIV if op == "floordiv" else FLOAT_FLOORMOD
    return Template(template).substitute(t=t, f=suffix)
