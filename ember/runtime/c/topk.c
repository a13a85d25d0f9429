/* topk in C: the one graph op no compute declaration expresses (ember/topi/registry.py),
 * so the AOT entry point calls this instead of a generated kernel.
 *
 * Semantics are the reference implementation's (ember/graph/ops/reduce.py): the data
 * is viewed as [outer, extent, inner] around the axis; along it the k largest (or
 * smallest) values come out sorted, ties in increasing index order, NaN above every
 * number (as NumPy sorts it). Each row is a stable merge sort of indices: O(n log n),
 * and stability gives the tie order for free. One function per dtype, from a macro. */

#include <stdlib.h>

#define EMBER_TOPK(SUFFIX, T)                                                              \
  /* Whether a sorts strictly above b: NaN (x != x) is above every number. */              \
  static int above_##SUFFIX(T a, T b) { return (a != a && b == b) || a > b; }              \
                                                                                           \
  /* Sorts order[0..n) (using spare[0..n)); returns the buffer holding the result. */      \
  static int64_t* sort_##SUFFIX(const T* row, int64_t stride, int64_t* order,              \
                                int64_t* spare, int64_t n, int32_t largest) {              \
    for (int64_t width = 1; width < n; width *= 2) {                                       \
      for (int64_t lo = 0; lo < n; lo += 2 * width) {                                      \
        int64_t mid = lo + width < n ? lo + width : n;                                     \
        int64_t hi = lo + 2 * width < n ? lo + 2 * width : n;                              \
        int64_t i = lo, j = mid, out = lo;                                                 \
        while (i < mid && j < hi) {                                                        \
          T left = row[order[i] * stride], right = row[order[j] * stride];                 \
          int right_first = largest ? above_##SUFFIX(right, left)                          \
                                    : above_##SUFFIX(left, right);                         \
          spare[out++] = right_first ? order[j++] : order[i++];                            \
        }                                                                                  \
        while (i < mid) spare[out++] = order[i++];                                         \
        while (j < hi) spare[out++] = order[j++];                                          \
      }                                                                                    \
      int64_t* merged = spare;                                                             \
      spare = order;                                                                       \
      order = merged;                                                                      \
    }                                                                                      \
    return order;                                                                          \
  }                                                                                        \
                                                                                           \
  int32_t ember_topk_##SUFFIX(const T* data, T* values, int64_t* indices, int64_t outer,   \
                              int64_t extent, int64_t inner, int64_t k, int32_t largest) { \
    int64_t* buffer = malloc(2 * (size_t)(extent ? extent : 1) * sizeof *buffer);          \
    if (buffer == NULL) {                                                                  \
      ember_set_error("topk: out of memory sorting rows of %lld", (long long)extent);      \
      return -1;                                                                           \
    }                                                                                      \
    for (int64_t o = 0; o < outer; ++o) {                                                  \
      for (int64_t in = 0; in < inner; ++in) {                                             \
        const T* row = data + o * extent * inner + in;                                     \
        for (int64_t e = 0; e < extent; ++e) buffer[e] = e;                                \
        int64_t* sorted = sort_##SUFFIX(row, inner, buffer, buffer + extent, extent,       \
                                        largest);                                          \
        for (int64_t r = 0; r < k; ++r) {                                                  \
          int64_t at = (o * k + r) * inner + in;                                           \
          indices[at] = sorted[r];                                                         \
          values[at] = row[sorted[r] * inner];                                             \
        }                                                                                  \
      }                                                                                    \
    }                                                                                      \
    free(buffer);                                                                          \
    return 0;                                                                              \
  }

EMBER_TOPK(float32, float)
EMBER_TOPK(float64, double)
EMBER_TOPK(int8, int8_t)
EMBER_TOPK(int16, int16_t)
EMBER_TOPK(int32, int32_t)
EMBER_TOPK(int64, int64_t)
EMBER_TOPK(uint8, uint8_t)
EMBER_TOPK(uint16, uint16_t)
EMBER_TOPK(uint32, uint32_t)
EMBER_TOPK(uint64, uint64_t)
