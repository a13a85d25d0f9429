/* The C ABI of an Ember library: instances, running, timing, per-step profile, errors.
 *
 * Hand-written once for every model; what differs per model (the tensors, the arena
 * size and the kernel calls) comes from the generated entry point through
 * `ember_model` and `ember_model_run` (ember_internal.h, prepended by Ember). The timing
 * loop is shared with the auto-scheduler's candidate timer (timing.h, prepended too);
 * how many threads each run uses is threads.h's policy (prepended too). */

#include <stdarg.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#ifdef _OPENMP
#include <omp.h>
#endif
#ifdef __linux__
#include <sys/mman.h> /* madvise */
#endif

typedef struct ember_instance {
  const void** params;  /* borrowed from the caller, or pointing into owned_params */
  void* owned_params;   /* the block ember_create_from_file read; NULL otherwise */
  unsigned char* arena; /* the intermediate tensors, laid out by the memory plan */
  int32_t adaptive;     /* runs choose their thread count (threads.h) */
  ember_thread_policy threads;
} ember_instance;

/* Each thread sees the message of its own last failed call. */
static _Thread_local char last_error[1024];

void ember_set_error(const char* format, ...) {
  va_list args;
  va_start(args, format);
  vsnprintf(last_error, sizeof last_error, format, args);
  va_end(args);
}

EMBER_EXPORT const char* ember_last_error(void) { return last_error; }

EMBER_EXPORT const char* ember_target(void) { return ember_model.target; }

/* A block of `nbytes` (params, arena). Blocks of 2 MB and more are asked to be backed
 * by huge pages where Linux has them: a network's kernels stream tens of MB of weights
 * and activations, and with 4 KB pages each one's walk misses the TLB where the tuner
 * (which times candidates on numpy arrays, in huge pages from 4 MB) saw no miss. On a
 * Zen 5, ResNet-50 from its artifact ran 0-3% faster. aligned_alloc wants a size that
 * is a multiple of the alignment, and never 0 here. */
void* ember_alloc_block(size_t nbytes) {
  size_t alignment = nbytes >= EMBER_HUGE_PAGE ? EMBER_HUGE_PAGE : EMBER_ALIGNMENT;
  size_t size = (nbytes + alignment - 1) / alignment * alignment;
  void* block = aligned_alloc(alignment, size ? size : alignment);
#ifdef MADV_HUGEPAGE
  if (block != NULL && alignment == EMBER_HUGE_PAGE) madvise(block, size, MADV_HUGEPAGE);
#endif
  return block;
}

static ember_instance* new_instance(void) {
  ember_instance* instance = calloc(1, sizeof *instance);
  if (instance == NULL) goto fail;
  size_t count = ember_model.num_params ? (size_t)ember_model.num_params : 1;
  instance->params = calloc(count, sizeof *instance->params);
  instance->arena = ember_alloc_block(ember_model.arena_bytes);
  if (instance->params == NULL || instance->arena == NULL) goto fail;
  const char* adaptive = getenv("EMBER_ADAPTIVE_THREADS");
  instance->adaptive = adaptive == NULL || strcmp(adaptive, "0") != 0;
  return instance;
fail:
  if (instance != NULL) {
    free(instance->params);
    free(instance->arena);
    free(instance);
  }
  ember_set_error("out of memory creating an instance (arena of %zu bytes)",
                  ember_model.arena_bytes);
  return NULL;
}

EMBER_EXPORT void ember_destroy(ember_instance* instance) {
  if (instance == NULL) return;
  free(instance->params);
  free(instance->owned_params);
  free(instance->arena);
  free(instance);
}

EMBER_EXPORT ember_instance* ember_create(const void* const* params) {
  if (ember_model.num_params > 0 && params == NULL) {
    ember_set_error("ember_create: params is NULL; pass %d param pointers in the order of "
                    "mod.json's \"params\"", ember_model.num_params);
    return NULL;
  }
  for (int32_t i = 0; i < ember_model.num_params; ++i) {
    if (params[i] == NULL && ember_model.params[i].nbytes > 0) {
      ember_set_error("ember_create: param %d ('%s') is NULL", i, ember_model.params[i].name);
      return NULL;
    }
  }
  ember_instance* instance = new_instance();
  if (instance == NULL) return NULL;
  for (int32_t i = 0; i < ember_model.num_params; ++i) instance->params[i] = params[i];
  return instance;
}

EMBER_EXPORT ember_instance* ember_create_from_file(const char* params_path) {
  if (params_path == NULL) {
    ember_set_error("ember_create_from_file: params_path is NULL; pass the path of mod.params");
    return NULL;
  }
  ember_instance* instance = new_instance();
  if (instance == NULL) return NULL;
  if (ember_read_safetensors(params_path, &ember_model, &instance->owned_params,
                             instance->params) != 0) {
    ember_destroy(instance);
    return NULL;
  }
  return instance;
}

static int32_t check_pointers(const char* what, const void* const* pointers, int32_t count,
                              const ember_tensor_spec* specs) {
  if (count > 0 && pointers == NULL) {
    ember_set_error("ember_run: %s is NULL; pass %d pointers in the order of mod.json's \"%s\"",
                    what, count, what);
    return -1;
  }
  for (int32_t i = 0; i < count; ++i) {
    if (pointers[i] == NULL && specs[i].nbytes > 0) {
      ember_set_error("ember_run: %s[%d] ('%s') is NULL", what, i, specs[i].name);
      return -1;
    }
  }
  return 0;
}

EMBER_EXPORT int32_t ember_run(ember_instance* instance, const void* const* inputs,
                               void* const* outputs) {
  if (instance == NULL) {
    ember_set_error("ember_run: instance is NULL; create one with ember_create first");
    return -1;
  }
  if (check_pointers("inputs", inputs, ember_model.num_inputs, ember_model.inputs) != 0 ||
      check_pointers("outputs", (const void* const*)outputs, ember_model.num_outputs,
                     ember_model.outputs) != 0) {
    return -1;
  }
#ifdef _OPENMP
  /* The caller's OpenMP setting (OMP_NUM_THREADS, omp_set_num_threads) is the most a
   * run uses; it is set back after the run. */
  int32_t most = omp_get_max_threads();
  if (instance->adaptive && most > 1) {
    if (instance->threads.max_threads != most) ember_threads_init(&instance->threads, most);
    int32_t threads = ember_threads_next(&instance->threads);
    omp_set_num_threads(threads);
    double start = ember_timing_now();
    int32_t status = ember_model_run(instance->params, inputs, outputs, instance->arena);
    double seconds = ember_timing_now() - start;
    omp_set_num_threads(most);
    if (status == 0) ember_threads_observe(&instance->threads, threads, seconds);
    return status;
  }
#endif
  return ember_model_run(instance->params, inputs, outputs, instance->arena);
}

/* The thread count the instance's runs use now: what threads.h chose, or OpenMP's
 * setting where the policy is off (EMBER_ADAPTIVE_THREADS=0), 1 without OpenMP. */
EMBER_EXPORT int32_t ember_threads(const ember_instance* instance) {
#ifdef _OPENMP
  int32_t most = omp_get_max_threads();
  if (instance != NULL && instance->adaptive && instance->threads.max_threads == most) {
    return instance->threads.threads;
  }
  return most;
#else
  (void)instance;
  return 1;
#endif
}

/* -- benchmark ----------------------------------------------------------------------- */

/* The loop itself is ember_time_repeats (timing.h, prepended by Ember). */

double ember_now_seconds(void) { return ember_timing_now(); }

typedef struct {
  ember_instance* instance;
  const void* const* inputs;
  void* const* outputs;
} benchmark_run;

static int32_t run_once(void* context) {
  benchmark_run* run = context;
  return ember_run(run->instance, run->inputs, run->outputs);
}

EMBER_EXPORT int32_t ember_benchmark(ember_instance* instance, const void* const* inputs,
                                     void* const* outputs, int32_t number, int32_t repeat,
                                     double min_repeat_ms, int32_t flush_cache,
                                     double* seconds_per_run) {
  if (number < 1 || repeat < 1 || seconds_per_run == NULL) {
    ember_set_error("ember_benchmark: needs number >= 1, repeat >= 1 and a seconds_per_run "
                    "array of repeat entries (got number=%d, repeat=%d)", number, repeat);
    return -1;
  }
  benchmark_run run = {instance, inputs, outputs};
  int32_t status = ember_time_repeats(run_once, &run, number, repeat, min_repeat_ms,
                                      flush_cache, 0.0, seconds_per_run);
  if (status == EMBER_TIMING_NO_MEMORY) {
    ember_set_error("ember_benchmark: out of memory for the %zu-byte cache flush buffer",
                    ember_timing_flush_bytes());
  }
  return status == 0 ? 0 : -1; /* ember_run set the error message */
}

/* -- profile ------------------------------------------------------------------------- */

EMBER_EXPORT int32_t ember_num_steps(void) { return ember_model.num_steps; }

EMBER_EXPORT const char* ember_step_name(int32_t step) {
  return step >= 0 && step < ember_model.num_steps ? ember_model.steps[step].name : NULL;
}

/* The kernel the step was built with (also while ember_set_step_kernel swapped it). */
EMBER_EXPORT const char* ember_step_kernel(int32_t step) {
  return step >= 0 && step < ember_model.num_steps ? ember_model.steps[step].kernel : NULL;
}

/* Has kernel step `step` call `kernel` (the same arguments, the packed convention)
 * instead of its own kernel; NULL gives it back its own. For tuning: a candidate
 * timed inside the network. It holds for every instance of this library in the
 * process, and must not be called while one runs. 0 = ok, -1 for a step that is no
 * kernel's. */
EMBER_EXPORT int32_t ember_set_step_kernel(int32_t step, ember_packed_kernel kernel) {
  if (step < 0 || step >= ember_model.num_steps || !ember_model.steps[step].packed) {
    ember_set_error("ember_set_step_kernel: step %d is not a kernel step of this model", step);
    return -1;
  }
  ember_model_kernels[step] = kernel ? kernel : ember_model.steps[step].packed;
  return 0;
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static double median_of(double* values, size_t count) {
  qsort(values, count, sizeof *values, compare_doubles);
  return count % 2 ? values[count / 2] : 0.5 * (values[count / 2 - 1] + values[count / 2]);
}

/* Runs the model `repeat` times after a warm-up run, reading the clock after every
 * step; seconds_per_step[i] (ember_num_steps() entries) is the median time of step i,
 * from the end of the step before it (or of the run's start) to its own end. */
EMBER_EXPORT int32_t ember_profile(ember_instance* instance, const void* const* inputs,
                                   void* const* outputs, int32_t repeat,
                                   double* seconds_per_step) {
  if (repeat < 1 || seconds_per_step == NULL) {
    ember_set_error("ember_profile: needs repeat >= 1 and a seconds_per_step array of "
                    "ember_num_steps() entries (got repeat=%d)", repeat);
    return -1;
  }
  if (ember_run(instance, inputs, outputs) != 0) return -1; /* warm up, and check the args */
  size_t steps = (size_t)ember_model.num_steps;
  if (steps == 0) return 0;
  double* ends = malloc(steps * sizeof *ends);
  double* samples = malloc(steps * (size_t)repeat * sizeof *samples); /* [step][repeat] */
  if (ends == NULL || samples == NULL) {
    free(ends);
    free(samples);
    ember_set_error("ember_profile: out of memory for %d x %zu step times", repeat, steps);
    return -1;
  }
  int32_t status = 0;
  for (int32_t r = 0; r < repeat && status == 0; ++r) {
    double start = ember_now_seconds();
    status = ember_model_run_timed(instance->params, inputs, outputs, instance->arena, ends);
    for (size_t i = 0; i < steps && status == 0; ++i) {
      samples[i * (size_t)repeat + (size_t)r] = ends[i] - (i ? ends[i - 1] : start);
    }
  }
  for (size_t i = 0; i < steps && status == 0; ++i) {
    seconds_per_step[i] = median_of(samples + i * (size_t)repeat, (size_t)repeat);
  }
  free(ends);
  free(samples);
  return status;
}
