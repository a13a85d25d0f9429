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


# Vectorised float32 math for GCC/clang vector types: `$v` is the float vector type,
# `$i` the int32 vector of as many lanes. Scalars in vector expressions are broadcast
# by the compiler; `(itype)v` reinterprets the bits. Rounding goes through
# __builtin_convertvector (truncation) rather than the add-1.5*2^23 trick, which
# -funsafe-math-optimizations (32-bit ARM) would fold away. Accuracy, over every
# float32 input (tests/codegen/test_vector_math.py): exp within 1.1 ulp where the
# result is a normal float; sigmoid and tanh within 2e-7 absolute; erf within 3.2e-7
# relative and absolute (5.3 ulp).
VECTOR_SELECT = """\
static inline $v ember_vselect_$v($i mask, $v a, $v b) {
  return ($v)((mask & ($i)a) | (~mask & ($i)b));
}"""
# e^xc = 2^n e^r for xc clamped by the caller: r by ln2 in two parts, e^r by Cephes'
# expf polynomial (p); ni = n, rounded by truncating t + $bias.5 (>= 0.5 after the
# clamp) less $bias. Shared by exp and sigmoid, which clamp differently.
_EXP_REDUCTION = """\
  $v t = xc * 1.44269504088896341f;
  $i ni = __builtin_convertvector(t + $bias.5f, $i) - $bias;
  $v n = __builtin_convertvector(ni, $v);
  $v r = (xc - n * 0.693359375f) - n * -2.12194440e-4f;
  $v p = r * 1.9875691500e-4f + 1.3981999507e-3f;
  p = p * r + 8.3334519073e-3f;
  p = p * r + 4.1665795894e-2f;
  p = p * r + 1.6666665459e-1f;
  p = p * r + 5.0000001201e-1f;
  p = p * (r * r) + r + 1.0f;
"""


def _exp_reduction(bias: int) -> str:
    return Template(_EXP_REDUCTION).safe_substitute(bias=bias)


VECTOR_EXP = (
    """\
static inline $v ember_vexp_$v($v x) {
  /* x = n ln2 + r, |r| <= ln2/2 (ln2 in two parts); e^r by Cephes' expf polynomial;
     2^n built in the exponent bits, as two factors so that n down to -150 fits.
     x is clamped to where that holds (the ends are fixed up last); a NaN fails
     both tests and stays NaN through every step. t + 150.5 >= 0.5 after the clamp,
     so truncating it rounds t to the nearest integer (plus 150). */
  $i big = x > 88.72283935546875f, small = x < -103.97208f;
  $v xc = ember_vselect_$v(big, ($v){0} + 88.72283935546875f, x);
  xc = ember_vselect_$v(small, ($v){0} - 103.97208f, xc);
"""
    + _exp_reduction(150)
    + """\
  $i half = ni >> 1;
  $v scale1 = ($v)((half + 127) << 23), scale2 = ($v)((ni - half + 127) << 23);
  $v y = p * scale1 * scale2;
  y = ember_vselect_$v(big, ($v){0} + __builtin_inff(), y);
  return ember_vselect_$v(small, ($v){0}, y);
}"""
)
VECTOR_SIGMOID = (
    """\
static inline $v ember_vsigmoid_$v($v x) {
  /* 1 / (1 + e^-x), e^-x as ember_vexp computes it but with -x clamped to
     [ln(FLT_MIN), ln(FLT_MAX)], where 2^n is one factor and nothing is fixed up
     after: at the low end e^-x is FLT_MIN and sigmoid 1, as in float; from n = 128
     (-x above 88.38) the factor's bits are +inf and sigmoid 0, within 4e-39 of it.
     A fifth less time than 1 / (1 + ember_vexp(-x)) (Zen 4): SiLU's sigmoid is
     most of EfficientNet-B0's 1x1 expansion convs. A NaN fails both tests and stays
     NaN; t + 126.5 >= 0.5 after the clamp, so truncating it rounds t (plus 126). */
  $v m = -x;
  $v xc = ember_vselect_$v(m > 88.72283935546875f, ($v){0} + 88.72283935546875f, m);
  xc = ember_vselect_$v(xc < -87.33654475f, ($v){0} - 87.33654475f, xc);
"""
    + _exp_reduction(126)
    + """\
  return 1.0f / (1.0f + p * ($v)((ni + 127) << 23));
}"""
)
VECTOR_TANH = """\
static inline $v ember_vtanh_$v($v x) {
  /* |x| < 0.625: x + x^3 P(x^2) (Cephes' tanhf); else 1 - 2 / (e^2|x| + 1), signed. */
  $i negative = x < 0;
  $v a = ember_vselect_$v(negative, -x, x);
  $v z = x * x;
  $v p = z * -5.70498872745e-3f + 2.06390887954e-2f;
  p = p * z - 5.37397155531e-2f;
  p = p * z + 1.33314422036e-1f;
  p = p * z - 3.33332819422e-1f;
  $v small = x + x * z * p;
  $v large = 1.0f - 2.0f / (ember_vexp_$v(a + a) + 1.0f);
  large = ember_vselect_$v(negative, -large, large);
  return ember_vselect_$v(a < 0.625f, small, large);
}"""
VECTOR_ERF = """\
static inline $v ember_verf_$v($v x) {
  /* x P(x^2) / Q(x^2) on |x| <= 3.925 (degrees 6 and 4: a rational least-squares fit
     to erf in double precision, 5e-8 relative; float rounding makes it 4e-7), and
     +-1 beyond, where erf rounds to +-1 in float. One division, no exp and no
     second branch: 2.3x faster than x P(x^2) / 1 - e^-x^2 R(1/|x|) / |x| both
     evaluated and selected (ViT-B/16's GELU, Zen 4). Beyond 3.925 the fraction
     may overflow to NaN, which the select replaces; a NaN input fails every
     comparison and stays NaN. The result is clamped to [-1, 1], which rounding can
     pass by 2e-7 near the ends. */
  $v z = x * x;
  $v p = z * 1.9872741674e-08f - 1.9564213289e-06f;
  p = p * z + 1.4210314839e-04f;
  p = p * z + 3.7161980290e-03f;
  p = p * z + 5.0621628761e-02f;
  p = p * z + 2.0029439032e-01f;
  p = p * z + 1.1283791065f;
  $v q = z * 9.5925730420e-04f + 1.4383908361e-02f;
  q = q * z + 1.1515055597e-01f;
  q = q * z + 5.1083791256e-01f;
  q = q * z + 1.0f;
  $v y = x * p / q;
  y = ember_vselect_$v((x > 3.925f) | (y > 1.0f), ($v){0} + 1.0f, y);
  return ember_vselect_$v((x < -3.925f) | (y < -1.0f), ($v){0} - 1.0f, y);
}"""
VECTOR_LOG = """\
static inline $v ember_vlog_$v($v x) {
  /* x = m 2^e with m in [sqrt(1/2), sqrt(2)); log(1 + f) for f = m - 1 by Cephes'
     logf polynomial; e ln2 added in two parts. Subnormals are scaled by 2^23 first.
     x < 0 and NaN give NaN, 0 gives -inf, +inf gives +inf (fixed up last). */
  $i tiny = x < 1.17549435e-38f;
  $v xs = ember_vselect_$v(tiny, x * 8388608.0f, x);
  $i bits = ($i)xs;
  $i e = ((bits >> 23) & 0xff) - 126 - (tiny & 23);
  $v m = ($v)((bits & 0x007fffff) | 0x3f000000);
  $i low = m < 0.707106781186547524f;
  e = e + low;
  $v f = m - 1.0f + ($v)(low & ($i)m);
  $v ef = __builtin_convertvector(e, $v);
  $v z = f * f;
  $v p = f * 7.0376836292e-2f - 1.1514610310e-1f;
  p = p * f + 1.1676998740e-1f;
  p = p * f - 1.2420140846e-1f;
  p = p * f + 1.4249322787e-1f;
  p = p * f - 1.6668057665e-1f;
  p = p * f + 2.0000714765e-1f;
  p = p * f - 2.4999993993e-1f;
  p = p * f + 3.3333331174e-1f;
  $v y = p * f * z + ef * -2.12194440e-4f - 0.5f * z;
  y = f + y + ef * 0.693359375f;
  y = ember_vselect_$v(x == __builtin_inff(), x, y);
  y = ember_vselect_$v(x == 0.0f, ($v){0} - __builtin_inff(), y);
  return ember_vselect_$v(x >= 0.0f, y, ($v){0} + __builtin_nanf(""));
}"""
# Which helpers each vectorised function needs, in the order they must be defined.
VECTOR_MATH = {
    "exp": ("vselect", "vexp"),
    "sigmoid": ("vselect", "vsigmoid"),
    "tanh": ("vselect", "vexp", "vtanh"),
    "erf": ("vselect", "verf"),
    "log": ("vselect", "vlog"),
}
VECTOR_MATH_BODIES = {
    "vselect": VECTOR_SELECT,
    "vexp": VECTOR_EXP,
    "vsigmoid": VECTOR_SIGMOID,
    "vtanh": VECTOR_TANH,
    "verf": VECTOR_ERF,
    "vlog": VECTOR_LOG,
}


def vector_math_helpers(name: str, vtype: str, itype: str) -> list[tuple[str, str]]:
    """(helper name, definition) of the helpers float32 vector `name` needs, in order;
    the last is the one to call."""
    return [
        (f"ember_{part}_{vtype}", Template(VECTOR_MATH_BODIES[part]).substitute(v=vtype, i=itype))
        for part in VECTOR_MATH[name]
    ]


# The dot-product step of a quantized conv (ember.codegen.c, `dot_product`): lane l of
# `acc` plus the four products of bytes a[0..3] (uint8) with w[4l..4l+3] (int8). The
# instructions are chosen by the compiler's target macros, so one source serves every
# target (the first condition that holds, per vector width); every variant is exact;
# where none holds, a loop of the same products.
_DOT4_INSTRUCTIONS = {
    16: [
        (
            "defined(__AVX512VNNI__) && defined(__AVX512F__)",
            "immintrin.h",
            "  return ($v)_mm512_dpbusd_epi32((__m512i)acc, _mm512_set1_epi32(quad), "
            "_mm512_loadu_si512(w));",
        )
    ],
    8: [
        (
            "defined(__AVX512VNNI__) && defined(__AVX512VL__)",
            "immintrin.h",
            "  return ($v)_mm256_dpbusd_epi32((__m256i)acc, _mm256_set1_epi32(quad), "
            "_mm256_loadu_si256((const __m256i*)w));",
        ),
        (
            "defined(__AVXVNNI__)",
            "immintrin.h",
            "  return ($v)_mm256_dpbusd_avx_epi32((__m256i)acc, _mm256_set1_epi32(quad), "
            "_mm256_loadu_si256((const __m256i*)w));",
        ),
        (
            # No byte dot product: bytes widened to int16 and vpmaddwd's exact pair
            # sums (vpmaddubsw's int16 pairs would saturate: 2 * 255 * 127 > 32767),
            # lanes 0-3 and 4-7 apart, then one horizontal add of the pairs and a
            # permute back into lane order.
            "defined(__AVX2__)",
            "immintrin.h",
            "  uint32_t bytes = (uint32_t)quad;\n"
            "  __m256i a16 = _mm256_set1_epi64x((long long)((bytes & 0xffu) | "
            "(bytes & 0xff00u) << 8 | (unsigned long long)(bytes & 0xff0000u) << 16 | "
            "(unsigned long long)(bytes & 0xff000000u) << 24));\n"
            "  __m256i low = _mm256_madd_epi16(_mm256_cvtepi8_epi16("
            "_mm_loadu_si128((const __m128i*)w)), a16);\n"
            "  __m256i high = _mm256_madd_epi16(_mm256_cvtepi8_epi16("
            "_mm_loadu_si128((const __m128i*)(w + 16))), a16);\n"
            "  __m256i sums = _mm256_permute4x64_epi64(_mm256_hadd_epi32(low, high), 0xd8);\n"
            "  return ($v)_mm256_add_epi32((__m256i)acc, sums);",
        ),
    ],
    4: [
        (
            "defined(__ARM_FEATURE_DOTPROD)",
            "arm_neon.h",
            # sdot multiplies signed bytes: a - 128 is a ^ 0x80 as int8, and the 128 * w
            # that takes off comes back as -(-128 * w), a second sdot.
            "  int8x16_t x = vreinterpretq_s8_u32(veorq_u32(vdupq_n_u32((uint32_t)quad), "
            "vdupq_n_u32(0x80808080u)));\n"
            "  int8x16_t wv = vld1q_s8(w);\n"
            "  int32x4_t r = vdotq_s32((int32x4_t)acc, x, wv);\n"
            "  return ($v)vsubq_s32(r, vdotq_s32(vdupq_n_s32(0), vdupq_n_s8(-128), wv));",
        ),
        (
            # Baseline NEON: bytes widened to int16 (a uint8 times an int8 fits),
            # multiplied, pairs added long into int32 (saddlp), and the two lanes' pairs
            # added (addp).
            "defined(__aarch64__) && defined(__ARM_NEON)",
            "arm_neon.h",
            "  int16x8_t a16 = vreinterpretq_s16_u16(vmovl_u8(vreinterpret_u8_u32("
            "vdup_n_u32((uint32_t)quad))));\n"
            "  int8x16_t wv = vld1q_s8(w);\n"
            "  int32x4_t low = vpaddlq_s16(vmulq_s16(vmovl_s8(vget_low_s8(wv)), a16));\n"
            "  int32x4_t high = vpaddlq_s16(vmulq_s16(vmovl_s8(vget_high_s8(wv)), a16));\n"
            "  return ($v)vaddq_s32((int32x4_t)acc, vpaddq_s32(low, high));",
        ),
    ],
}


def dot4_helper(vtype: str, lanes: int) -> str:
    """`ember_dot4_u8i8_<vtype>(acc, a, w)` for an int32 vector type of `lanes`."""
    lines: list[str] = []
    instructions = _DOT4_INSTRUCTIONS.get(lanes, [])
    for index, (condition, header, _) in enumerate(instructions):
        lines.append(f"#{'if' if index == 0 else 'elif'} {condition}")
        lines.append(f"#include <{header}>")
    if instructions:
        lines.append("#endif")
    name = f"ember_dot4_u8i8_{vtype}"
    lines.append(f"static inline $v {name}($v acc, const uint8_t* a, const int8_t* w) {{")
    for index, (condition, _, body) in enumerate(instructions):
        lines.append(f"#{'if' if index == 0 else 'elif'} {condition}")
        lines.append("  int32_t quad;\n  memcpy(&quad, a, 4);")
        lines.append(body)
    if instructions:
        lines.append("#else")
    lines.append(
        f"  for (int l = 0; l < {lanes}; ++l)\n"
        "    acc[l] += a[0] * w[4 * l] + a[1] * w[4 * l + 1] + a[2] * w[4 * l + 2] + "
        "a[3] * w[4 * l + 3];\n  return acc;"
    )
    if instructions:
        lines.append("#endif")
    lines.append("}")
    return Template("\n".join(lines)).substitute(v=vtype)
