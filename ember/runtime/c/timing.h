/* The timing loop shared by a library's `ember_benchmark` (runtime.c) and the
 * auto-scheduler's candidate timer (ember/autoschedule/c/measure.c), so a model and
 * its tuned kernels are timed the same way.
 *
 * Like ember_internal.h, Ember prepends this text to the sources that use it (after
 * the POSIX feature macros), so the build cache keys on its content. Everything here
 * is static: each library gets its own private copy. */

#ifndef EMBER_TIMING_H
#define EMBER_TIMING_H

#include <stdint.h>
#include <stdlib.h>
#include <time.h>
#include <unistd.h>

/* What ember_time_repeats returns besides 0 (ok) and a failed run's own status. */
#define EMBER_TIMING_NO_MEMORY (-1000)

/* One call of what is timed (a model run, a kernel's packed entry); 0 = ok. */
typedef int32_t (*ember_timed_fn)(void* context);

/* A monotonic clock in seconds. */
static inline double ember_timing_now(void) {
  struct timespec time;
  clock_gettime(CLOCK_MONOTONIC, &time);
  return (double)time.tv_sec + 1e-9 * (double)time.tv_nsec;
}

/* Larger than the last-level cache (as the OS reports it; in a VM that may be the
 * whole socket's), so writing it evicts the timed code's data. */
static inline size_t ember_timing_flush_bytes(void) {
  size_t bytes = 64u << 20;
#ifdef _SC_LEVEL3_CACHE_SIZE
  long llc = sysconf(_SC_LEVEL3_CACHE_SIZE);
  if (llc > 0 && (size_t)llc + (size_t)llc / 2 > bytes) bytes = (size_t)llc + (size_t)llc / 2;
#endif
  return bytes > (512u << 20) ? (512u << 20) : bytes;
}

static inline void ember_timing_evict(volatile unsigned char* buffer, size_t nbytes) {
  for (size_t i = 0; i < nbytes; i += 64) buffer[i] = (unsigned char)(buffer[i] + 1);
}

/* How many more runs a repeat needs after `runs` runs took `elapsed` seconds, short of
 * min_repeat_ms. Under a tenth of it, the runs so far are a pilot: the next batch
 * brings the repeat to about a tenth (and at least 1.618 times the runs so far). From
 * there the speed seen is steady enough to size the rest, with 5% to spare. Sized from
 * the first few calls instead (slower or faster than the steady state: caches, thread
 * wake-up), a batch often fell short and was thrown away for one 1.618 times longer: a
 * 100 ms warm timing took 160-175 ms a candidate. */
static inline int64_t ember_timing_more(int64_t runs, double elapsed, double min_repeat_ms) {
  double per_run = elapsed / (double)runs;
  double pilot_ms = min_repeat_ms / 10;
  int pilot = elapsed * 1e3 < pilot_ms;
  double target_ms = pilot ? pilot_ms : min_repeat_ms * 1.05;
  double total = per_run > 0 ? target_ms * 1e-3 / per_run + 1 : (double)runs * 2;
  double least = pilot ? (double)runs * 1.618 : (double)runs + 1;
  double more = (total > least ? total : least) - (double)runs;
  return more > 1e9 ? 1000000000 : (int64_t)more + 1;
}

static inline void ember_timing_sleep(double milliseconds) {
  if (milliseconds <= 0) return;
  struct timespec pause;
  pause.tv_sec = (time_t)(milliseconds / 1e3);
  pause.tv_nsec = (long)((milliseconds - 1e3 * (double)pause.tv_sec) * 1e6);
  nanosleep(&pause, NULL);
}

/* Called before each timed call, outside the timed interval: e.g. the auto-scheduler's
 * cold-weights timing evicts the kernel's weights from the caches here. */
typedef void (*ember_prepare_fn)(void* context);

/* Seconds `runs` calls of `run` take. Without `prepare`, one interval around the whole
 * batch; with it, `prepare` runs before each call and only the calls are timed (the sum
 * of one interval per call). Stops at the first non-zero status, left in *status. */
static inline double ember_timing_batch(ember_timed_fn run, void* context,
                                        ember_prepare_fn prepare, void* prepare_context,
                                        int64_t runs, int32_t* status) {
  if (prepare == NULL) {
    double start = ember_timing_now();
    for (int64_t i = 0; i < runs && *status == 0; ++i) *status = run(context);
    return ember_timing_now() - start;
  }
  double elapsed = 0.0;
  for (int64_t i = 0; i < runs && *status == 0; ++i) {
    prepare(prepare_context);
    double start = ember_timing_now();
    *status = run(context);
    elapsed += ember_timing_now() - start;
  }
  return elapsed;
}

/* Runs `run` once (warm-up, and a check that it works), then `repeat` times: each
 * repeat calls it `number` times, and more, in batches, until its calls last at least
 * min_repeat_ms in all (of timed calls; `ember_timing_more` sizes the batches), and
 * writes the seconds per call to seconds_per_run[r]; later repeats start with as many
 * calls as the first one made. With flush_cache, the last-level cache is evicted
 * before each timed batch; with `prepare` (may be NULL), prepare(prepare_context) runs
 * before each timed call, untimed; cooldown_ms is slept between repeats. Returns 0,
 * the first non-zero status of `run`, or EMBER_TIMING_NO_MEMORY. The caller checks
 * number >= 1 and repeat >= 1. */
static inline int32_t ember_time_prepared(ember_timed_fn run, void* context,
                                          ember_prepare_fn prepare, void* prepare_context,
                                          int32_t number, int32_t repeat, double min_repeat_ms,
                                          int32_t flush_cache, double cooldown_ms,
                                          double* seconds_per_run) {
  int32_t status = run(context);
  if (status != 0) return status;
  unsigned char* buffer = NULL;
  size_t buffer_bytes = ember_timing_flush_bytes();
  if (flush_cache && (buffer = malloc(buffer_bytes)) == NULL) return EMBER_TIMING_NO_MEMORY;
  int64_t first_batch = number;
  for (int32_t r = 0; r < repeat && status == 0; ++r) {
    if (r > 0) ember_timing_sleep(cooldown_ms);
    int64_t runs = 0;
    double elapsed = 0.0;
    for (int64_t batch = first_batch;;) {
      if (buffer != NULL) ember_timing_evict(buffer, buffer_bytes);
      elapsed += ember_timing_batch(run, context, prepare, prepare_context, batch, &status);
      runs += batch;
      if (status != 0) break;
      if (elapsed * 1e3 >= min_repeat_ms || runs >= 1000000000) {
        seconds_per_run[r] = elapsed / (double)runs;
        break;
      }
      batch = ember_timing_more(runs, elapsed, min_repeat_ms);
    }
    first_batch = runs;
  }
  free(buffer);
  return status;
}

/* ember_time_prepared without a prepare step: a model's ember_benchmark. */
static inline int32_t ember_time_repeats(ember_timed_fn run, void* context, int32_t number,
                                         int32_t repeat, double min_repeat_ms,
                                         int32_t flush_cache, double cooldown_ms,
                                         double* seconds_per_run) {
  return ember_time_prepared(run, context, NULL, NULL, number, repeat, min_repeat_ms,
                             flush_cache, cooldown_ms, seconds_per_run);
}

#endif
