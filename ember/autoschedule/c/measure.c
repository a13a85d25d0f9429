/* The auto-scheduler's candidate timer, loaded by the measure worker
 * (ember/autoschedule/measure_worker.py). Ember prepends the POSIX feature macros and
 * the timing loop (ember/runtime/c/timing.h), the one a model's ember_benchmark uses,
 * so tuned kernels are timed as the model that runs them will be. */

#include <stdint.h>

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

/* What ember_measure returns. */
#define MEASURE_OK 0
#define MEASURE_KERNEL_FAILED 1 /* the kernel's non-zero status is in *kernel_status */
#define MEASURE_BAD_SETTINGS 2
#define MEASURE_NO_MEMORY 3 /* for the cache-flush buffer */

/* Times entry(args, num_args): a warm-up call, then `repeat` repeats of `number` calls
 * or more (until one lasts min_repeat_ms), seconds per call into seconds_per_run;
 * cooldown_ms of sleep between repeats. */
__attribute__((visibility("default"))) int32_t ember_measure(
    ember_packed_fn entry, void* const* args, int32_t num_args, int32_t number, int32_t repeat,
    double min_repeat_ms, int32_t flush_cache, double cooldown_ms, double* seconds_per_run,
    int32_t* kernel_status) {
  *kernel_status = 0;
  if (entry == NULL || number < 1 || repeat < 1 || seconds_per_run == NULL) {
    return MEASURE_BAD_SETTINGS;
  }
  packed_call call = {entry, args, num_args, 0};
  int32_t status = ember_time_repeats(call_packed, &call, number, repeat, min_repeat_ms,
                                      flush_cache, cooldown_ms, seconds_per_run);
  if (call.status != 0) {
    *kernel_status = call.status;
    return MEASURE_KERNEL_FAILED;
  }
  return status == 0 ? MEASURE_OK : MEASURE_NO_MEMORY;
}
