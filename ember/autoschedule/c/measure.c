/* The auto-scheduler's candidate timer, loaded by the measure worker
 * (ember/autoschedule/measure_worker.py). Ember prepends the POSIX feature macros and
 * the timing loop (ember/runtime/c/timing.h), the one a model's ember_benchmark uses,
 * so tuned kernels are timed as the model that runs them will be.
 *
 * Cold-weights timing puts the caches, before each timed call and untimed, in the state
 * a kernel meets inside a network: the last-level cache full of other data (the kernels
 * before it), its own input cached (the previous kernel has just written it), and its
 * weight arguments (constant params) in memory (a large model's weights do not fit in
 * the last-level cache). The full cache matters, not only the evicted weights: with
 * the weights merely evicted, the cache has room for them, and a schedule that reads
 * the 8 MB weights of a ResNet-50 stage-4 conv once per output row from the last-level
 * cache timed as fast as the default schedule that reads them once; in the network it
 * ran 1.15-1.25x slower, and so did it here once the cache was first filled with other
 * data (BENCHMARKS.md, "Issue 19, fourth session"). */

#include <stddef.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#ifdef __linux__
#include <sys/mman.h>
#endif

/* How a cache line is written back and dropped from all levels: clflush on x86 (in the
 * x86-64 baseline), dc civac on AArch64; elsewhere (or with
 * EMBER_MEASURE_PORTABLE_EVICTION, which tests use to cover that path) the whole
 * last-level cache is flushed and the other arguments read back in. */
#if (defined(__x86_64__) || defined(__i386__)) && !defined(EMBER_MEASURE_PORTABLE_EVICTION)
#include <emmintrin.h>
#define EVICT_BY_LINE 1
static size_t cache_line_bytes(void) { return 64; } /* clflush's line on every x86-64 */
static void evict_line(const void* address) { _mm_clflush(address); }
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

/* What evict_weights needs: the arguments, their sizes, which are weights, and the
 * other data to fill the caches with. */
typedef struct {
  void* const* args;
  const int64_t* arg_bytes;
  const int32_t* arg_is_weight;
  int32_t num_args;
  const float* fill;
  int64_t fill_floats;
} weight_eviction;

/* The largest cache of `level` (bytes) cpu0's sysfs lists, 0 if none (not Linux). The
 * sysfs sizes are what one core sees; sysconf's may be the host's, in a VM: 384 MB for
 * a Zen 5 guest with a 32 MB L3, which made each fill take 10 ms. */
static size_t sysfs_cache_bytes(int level) {
  size_t largest = 0;
  for (int index = 0; index < 16; ++index) {
    char path[96];
    int found = 0;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/level", index);
    FILE* file = fopen(path, "r");
    if (file == NULL) break;
    if (fscanf(file, "%d", &found) != 1) found = 0;
    fclose(file);
    if (found != level) continue;
    snprintf(path, sizeof path, "/sys/devices/system/cpu/cpu0/cache/index%d/size", index);
    file = fopen(path, "r");
    if (file == NULL) continue;
    unsigned long long size = 0;
    char unit = 0;
    if (fscanf(file, "%llu%c", &size, &unit) >= 1) {
      size *= unit == 'K' ? 1024ull : unit == 'M' ? 1024ull * 1024 : 1;
      if (size > largest) largest = (size_t)size;
    }
    fclose(file);
  }
  return largest;
}

/* How much other data fills the caches: the last-level cache's size when the weights
 * are then evicted line by line (more only takes longer: 32 MB took 0.34 ms on a
 * 32 MB L3, 64 MB 1.4 ms, without making the timings nearer the network's); on the
 * portable path, where the fill alone must evict the weights, more than the cache
 * (timing.h). */
static size_t fill_bytes(void) {
#if EVICT_BY_LINE
  size_t llc = sysfs_cache_bytes(3);
  if (llc == 0) llc = sysfs_cache_bytes(2);
  if (llc > 0) return llc;
#endif
  return ember_timing_flush_bytes();
}

/* The fill data, made once per process (the measure worker lives for many candidates)
 * and never freed. Written once: untouched pages would all read as the one zero page.
 * Huge pages where the OS has them, so reading it does not also empty the TLB, which a
 * network's kernels do not do to each other. NULL when out of memory. */
static const float* fill_data(size_t* nbytes) {
  static float* data = NULL;
  static size_t bytes = 0;
  if (data == NULL) {
    size_t huge = (size_t)2 << 20;
    bytes = (fill_bytes() + huge - 1) / huge * huge;
    data = aligned_alloc(huge, bytes);
    if (data == NULL) return NULL;
#ifdef MADV_HUGEPAGE
    madvise(data, bytes, MADV_HUGEPAGE);
#endif
    memset(data, 1, bytes);
  }
  *nbytes = bytes;
  return data;
}

static volatile float fill_sink;

/* Reads the fill data on every thread a kernel uses: each core's caches and the shared
 * last-level cache end up full of it. */
static void fill_caches(const float* fill, int64_t floats) {
  float total = 0;
#pragma omp parallel for reduction(+ : total)
  for (int64_t i = 0; i < floats; i += 16) total += fill[i];
  fill_sink = total;
}

/* The address of the cache line holding `data`. */
static uintptr_t line_of(const void* data) {
  return (uintptr_t)data & ~(uintptr_t)(cache_line_bytes() - 1);
}

/* The prepare step of cold-weights timing (see the top of the file). */
static void evict_weights(void* context) {
  const weight_eviction* eviction = context;
  size_t step = cache_line_bytes();
  fill_caches(eviction->fill, eviction->fill_floats);
  for (int32_t i = 0; i < eviction->num_args; ++i) {
    if (eviction->arg_is_weight[i]) continue;
    uintptr_t end = (uintptr_t)eviction->args[i] + (uintptr_t)eviction->arg_bytes[i];
    for (uintptr_t line = line_of(eviction->args[i]); line < end; line += step) {
      (void)*(const volatile unsigned char*)line; /* a volatile read is never dropped */
    }
  }
#if EVICT_BY_LINE
  for (int32_t i = 0; i < eviction->num_args; ++i) {
    if (!eviction->arg_is_weight[i]) continue;
    uintptr_t end = (uintptr_t)eviction->args[i] + (uintptr_t)eviction->arg_bytes[i];
    for (uintptr_t line = line_of(eviction->args[i]); line < end; line += step) {
      evict_line((const void*)line);
    }
  }
  evict_fence(); /* the write-backs are done before the timed call starts */
#endif
}

/* What ember_measure returns. */
#define MEASURE_OK 0
#define MEASURE_KERNEL_FAILED 1 /* the kernel's non-zero status is in *kernel_status */
#define MEASURE_BAD_SETTINGS 2
#define MEASURE_NO_MEMORY 3 /* for the cache-fill data */

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
  if (cold_weights) {
    size_t nbytes = 0;
    eviction.fill = fill_data(&nbytes);
    if (eviction.fill == NULL) return MEASURE_NO_MEMORY;
    eviction.fill_floats = (int64_t)(nbytes / sizeof(float));
  }
  int32_t status = ember_time_prepared(call_packed, &call, cold_weights ? evict_weights : NULL,
                                       &eviction, number, repeat, min_repeat_ms, flush_cache,
                                       cooldown_ms, seconds_per_run);
  if (call.status != 0) {
    *kernel_status = call.status;
    return MEASURE_KERNEL_FAILED;
  }
  return status == 0 ? MEASURE_OK : MEASURE_NO_MEMORY;
}
