/* What the hand-written runtime (runtime.c, safetensors.c, topk.c) and the generated
 * AOT entry point (ember/runtime/aot.py) share inside one Ember library.
 *
 * Every translation unit of the library is compiled with -fvisibility=hidden, so
 * everything declared here stays private to the library; only EMBER_EXPORT functions
 * (the C ABI in runtime.c) are exported. Ember prepends this header's text to each
 * source instead of #including it, so the build cache keys on its content. */

#ifndef EMBER_INTERNAL_H
#define EMBER_INTERNAL_H

#include <stddef.h>
#include <stdint.h>

#define EMBER_EXPORT __attribute__((visibility("default")))
#define EMBER_ALIGNMENT 64
#define EMBER_HUGE_PAGE ((size_t)2 << 20)

/* An aligned block, in huge pages from 2 MB where the OS has them (runtime.c). */
void* ember_alloc_block(size_t nbytes);

/* One tensor the library reads or writes at its boundary. `dtype` is the safetensors
 * spelling (F32, I64, ...); `shape` has `ndim` entries. */
typedef struct {
  const char* name;
  const char* dtype;
  int32_t ndim;
  const int64_t* shape;
  size_t nbytes;
} ember_tensor_spec;

/* A kernel's packed entry point (ember/codegen/c.py): 0 = ok. */
typedef int32_t (*ember_packed_kernel)(void* const* args, int32_t num_args);

/* One step of the entry point, in run order: `name` is its fused group (mod.json's
 * "groups"), or "output N" for a copy to an output; `kernel` is the function it
 * calls (a kernel's packed entry, a runtime helper, or memcpy); `packed` is that
 * packed entry for a kernel step, NULL for the others. */
typedef struct {
  const char* name;
  const char* kernel;
  ember_packed_kernel packed;
} ember_step_info;

/* What each kernel step calls, by step (NULL for the other steps): its own kernel's
 * packed entry unless ember_set_step_kernel put another there. Defined by the
 * generated entry point. */
extern ember_packed_kernel ember_model_kernels[];

/* The model compiled into the library, defined by the generated entry point. */
typedef struct {
  const char* target;
  int32_t num_inputs;
  int32_t num_outputs;
  int32_t num_params;
  const ember_tensor_spec* inputs;
  const ember_tensor_spec* outputs;
  const ember_tensor_spec* params;
  size_t arena_bytes;
  int32_t num_steps;
  const ember_step_info* steps;
} ember_model_info;

extern const ember_model_info ember_model;

/* Runs every step of the model once; 0 = ok, else -1 with ember_set_error called. */
int32_t ember_model_run(const void* const* params, const void* const* inputs,
                        void* const* outputs, unsigned char* arena);

/* The same, also writing ember_now_seconds() to step_ends[i] after step i. */
int32_t ember_model_run_timed(const void* const* params, const void* const* inputs,
                              void* const* outputs, unsigned char* arena, double* step_ends);

/* A monotonic clock in seconds. */
double ember_now_seconds(void);

/* Records the message ember_last_error() returns (per thread). */
void ember_set_error(const char* format, ...) __attribute__((format(printf, 1, 2)));

/* Reads every param of `model` from a safetensors file into one aligned block
 * (returned in *block, freed by the caller) and points params[i] into it. */
int32_t ember_read_safetensors(const char* path, const ember_model_info* model, void** block,
                               const void** params);

#endif
