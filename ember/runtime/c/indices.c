/* Run-time checks of data-dependent indices (gather, gather_elements), called by the
 * entry point before the kernel that reads through them: an index outside
 * [-extent, extent) makes ember_run fail with the node and the index named, as the
 * reference interpreter raises, instead of the kernel reading a wrapped position. */

#define EMBER_CHECK_INDICES(SUFFIX, T)                                                     \
  int32_t ember_check_indices_##SUFFIX(const T* indices, int64_t count, int64_t extent,    \
                                       const char* node) {                                 \
    for (int64_t i = 0; i < count; ++i) {                                                  \
      if (indices[i] < -extent || indices[i] >= extent) {                                  \
        ember_set_error("%s: index %lld (element %lld of its indices) is out of range "    \
                        "for an axis of size %lld",                                        \
                        node, (long long)indices[i], (long long)i, (long long)extent);     \
        return -1;                                                                         \
      }                                                                                    \
    }                                                                                      \
    return 0;                                                                              \
  }

EMBER_CHECK_INDICES(int32, int32_t)
EMBER_CHECK_INDICES(int64, int64_t)
