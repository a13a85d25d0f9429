/* The auto-scheduler's candidate timer, loaded by the measure worker
 * (ember/autoschedule/measure_worker.py). Ember prepends the POSIX feature macros and
 * the timing loop (ember/runtime/c/timing.h), the one a model's ember_benchmark uses,
 * so tuned kernels are timed as the model that runs them will be.
 *
 * Cold-weights timing evicts the kernel's weight arguments (constant params) from every
 * cache level before each timed call, untimed, and leaves its other arguments cached:
 * inside a network the previous kernel has just written the input, while the weights
 * of a large model do not fit in the last-level cache and come from memory. */

#include <stddef.h>
#include <stdint.h>

/* How a cache line is written back and dropped from all levels: on x86 clflushopt where
 * the target has it, else clflush (in the x86-64 baseline); dc civac on AArch64;
 * elsewhere (or with EMBER_MEASURE_PORTABLE_EVICTION, which tests use to cover that
 * path) the whole last-level cache is flushed and the other arguments read back in.
 * clflush is ordered with every other clflush, so one line waits for the last: 9.4 MB
 * of ResNet-18's weights took 6.9 ms to evict on a 2-core Xeon, ten times a candidate,
 * half of cold-weights timing's cost. clflushopt lines are evicted in parallel (0.42
 * ms), and the mfence after them still waits for all before the timed call. */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(EMBER_MEASURE_PORTABLE_EVICTION)
#include <immintrin.h>
#define EVICT_BY_LINE 1
static size_t cache_line_bytes(void) { return 64; } /* clflush's line on every x86-64 */
#if defined(__CLFLUSHOPT__) && !defined(EMBER_MEASURE_CLFLUSH) /* tests cover clflush */
static void evict_line(const void* address) { _mm_clflushopt((void*)address); }
#else
static void evict_line(const void* address) { _mm_clflush(address); }
#endif
static void evict_fence(void) { _mm_mfence(); }
#elif defined(__aarch64__) && !defined(EMBER_MEASURE_PORTABLE_EVICTION)
#define EVICT_BY_LINE 1
static size_t cache_line_bytes(void) {
  uint64_t ctr;
  __asm__ volatile("mrs %0, ctr_el0" : "=r"(ctr));
  return (size_t)4 << ((ctr >> 16) & 0xF); /* CTR_EL0.DminLine: log2 of words */
}
static void evict_line(const void* address) {
  __asm__ volatile("dc civac, %0" : : "r"(address) : "memory");
}
static void evict_fence(void) { __asm__ volatile("dsb ish" : : : "memory"); }
#else
#define EVICT_BY_LINE 0
static size_t cache_line_bytes(void) { return 64; }
#endif

/* A kernel's packed entry (ember/codegen/c.py): 0 = ok, -1 = wrong num_args. */
typedef int32_t (*ember_packed_fn)(void* const* args, int32_t num_args);

typedef struct {
  ember_packed_fn entry;
  void* const* args;
  int32_t num_args;
  int32_t status; /* the kernel's last status */
} packed_call;

static int32_t call_packed(void* context) {
  packed_call* call = context;
  call->status = call->entry(call->args, call->num_args);
  return call->status;
}

/* What evict_weights needs: the arguments, their sizes, which are weights. */
typedef struct {
  void* const* args;
  const int64_t* arg_bytes;
  const int32_t* arg_is_weight;
  int32_t num_args;
  unsigned char* flush_buffer; /* the portable path's; NULL when evicting by line */
  size_t flush_bytes;
} weight_eviction;

static int has_weights(const weight_eviction* eviction) {
  for (int32_t i = 0; i < eviction->num_args; ++i) {
    if (eviction->arg_is_weight[i] && eviction->arg_bytes[i] > 0) return 1;
  }
  return 0;
}

/* The address of the cache line holding `data`. */
static uintptr_t line_of(const void* data) {
  return (uintptr_t)data & ~(uintptr_t)(cache_line_bytes() - 1);
}

/* The prepare step of cold-weights timing (see the top of the file). */
static void evict_weights(void* context) {
  const weight_eviction* eviction = context;
  size_t step = cache_line_bytes();
#if EVICT_BY_LINE
  for (int32_t i = 0; i < eviction->num_args; ++i) {
    if (!eviction->arg_is_weight[i]) continue;
    uintptr_t end = (uintptr_t)eviction->args[i] + (uintptr_t)eviction->arg_bytes[i];
    for (uintptr_t line = line_of(eviction->args[i]); line < end; line += step) {
      evict_line((const void*)line);
    }
  }
  evict_fence(); /* the write-backs are done before the timed call starts */
#else
  if (eviction->flush_buffer == NULL) return; /* no weights */
  ember_timing_evict(eviction->flush_buffer, eviction->flush_bytes);
  for (int32_t i = 0; i < eviction->num_args; ++i) {
    if (eviction->arg_is_weight[i]) continue;
    uintptr_t end = (uintptr_t)eviction->args[i] + (uintptr_t)eviction->arg_bytes[i];
    for (uintptr_t line = line_of(eviction->args[i]); line < end; line += step) {
      (void)*(const volatile unsigned char*)line; /* a volatile read is never dropped */
    }
  }
#endif
}

/* What ember_measure returns. */
#define MEASURE_OK 0
#define MEASURE_KERNEL_FAILED 1 /* the kernel's non-zero status is in *kernel_status */
#define MEASURE_BAD_SETTINGS 2
#define MEASURE_NO_MEMORY 3 /* for the cache-flush buffer */

/* Times entry(args, num_args): a warm-up call, then `repeat` repeats of `number` calls
 * or more (until one lasts min_repeat_ms), seconds per call into seconds_per_run;
 * cooldown_ms of sleep between repeats. flush_cache: the last-level cache is flushed
 * before each repeat's batch of calls. cold_weights: the arguments i with
 * arg_is_weight[i] (arg_bytes[i] bytes) are evicted before every call, untimed, and
 * each call is timed on its own. */
__attribute__((visibility("default"))) int32_t ember_measure(
    ember_packed_fn entry, void* const* args, int32_t num_args, int32_t number, int32_t repeat,
    double min_repeat_ms, int32_t flush_cache, int32_t cold_weights, const int64_t* arg_bytes,
    const int32_t* arg_is_weight, double cooldown_ms, double* seconds_per_run,
    int32_t* kernel_status) {
  *kernel_status = 0;
  if (entry == NULL || number < 1 || repeat < 1 || seconds_per_run == NULL ||
      (cold_weights && (arg_bytes == NULL || arg_is_weight == NULL))) {
    return MEASURE_BAD_SETTINGS;
  }
  packed_call call = {entry, args, num_args, 0};
  weight_eviction eviction = {args, arg_bytes, arg_is_weight, num_args, NULL, 0};
  if (cold_weights && !EVICT_BY_LINE && has_weights(&eviction)) {
    eviction.flush_bytes = ember_timing_flush_bytes();
    eviction.flush_buffer = malloc(eviction.flush_bytes);
    if (eviction.flush_buffer == NULL) return MEASURE_NO_MEMORY;
  }
  int32_t status = ember_time_prepared(call_packed, &call, cold_weights ? evict_weights : NULL,
                                       &eviction, number, repeat, min_repeat_ms, flush_cache,
                                       cooldown_ms, seconds_per_run);
  free(eviction.flush_buffer);
  if (call.status != 0) {
    *kernel_status = call.status;
    return MEASURE_KERNEL_FAILED;
  }
  return status == 0 ? MEASURE_OK : MEASURE_NO_MEMORY;
}
