/* Run an Ember artifact from C: no Python, only dlopen and the library's C ABI.
 *
 *   deploy MOD_SO MOD_PARAMS INPUT_BIN INPUT_SHAPE OUTPUT_SHAPE [REPEAT]
 *   deploy model/mod.so model/mod.params cat.bin 1x3x224x224 1x1000
 *
 * For a network with one float32 input and one float32 output (an image
 * classifier): reads the input as raw little-endian float32 from INPUT_BIN, runs
 * the network once, prints the five highest scores of the output with their
 * class indices, then times the network with ember_benchmark (the timing loop
 * lives in the library, so C and Python measure the same thing). The shapes are
 * in mod.json ("inputs"/"outputs"); the library itself does not describe them,
 * so they are given here and the input file's size is checked against them.
 */
#include <dlfcn.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>

#define TOP_K 5
#define MIN_REPEAT_MS 50.0

typedef struct ember_instance ember_instance;

/* The C ABI every Ember mod.so exports. */
typedef struct {
  ember_instance* (*create_from_file)(const char* params_path);
  int32_t (*run)(ember_instance*, const void* const* inputs, void* const* outputs);
  int32_t (*benchmark)(ember_instance*, const void* const* inputs, void* const* outputs,
                       int32_t number, int32_t repeat, double min_repeat_ms,
                       int32_t flush_cache, double* seconds_per_run);
  void (*destroy)(ember_instance*);
  const char* (*target)(void);
  const char* (*last_error)(void);
} ember_api;

static void fail(const char* what, const char* detail) {
  fprintf(stderr, "deploy: %s%s%s\n", what, detail ? ": " : "", detail ? detail : "");
  exit(1);
}

static void* symbol(void* library, const char* name) {
  void* address = dlsym(library, name);
  if (!address) fail("mod.so is not an Ember library, missing", name);
  return address;
}

/* dlsym returns void*; going through memcpy keeps ISO C happy about the
 * object-pointer to function-pointer conversion. */
#define BIND(api, library, field, name) \
  do { void* p_ = symbol(library, name); memcpy(&(api)->field, &p_, sizeof p_); } while (0)

static ember_api load_api(const char* path) {
  void* library = dlopen(path, RTLD_NOW | RTLD_LOCAL);
  if (!library) fail("cannot load the library", dlerror());
  ember_api api;
  BIND(&api, library, create_from_file, "ember_create_from_file");
  BIND(&api, library, run, "ember_run");
  BIND(&api, library, benchmark, "ember_benchmark");
  BIND(&api, library, destroy, "ember_destroy");
  BIND(&api, library, target, "ember_target");
  BIND(&api, library, last_error, "ember_last_error");
  return api;
}

/* "1x3x224x224" -> number of elements; 0 for a malformed shape. */
static size_t shape_elements(const char* shape) {
  size_t elements = 1;
  const char* cursor = shape;
  while (*cursor) {
    char* end;
    unsigned long extent = strtoul(cursor, &end, 10);
    if (end == cursor || extent == 0) return 0;
    elements *= extent;
    if (*end == 'x' || *end == ',') end++;
    else if (*end) return 0;
    cursor = end;
  }
  return cursor == shape ? 0 : elements;
}

static float* read_input(const char* path, size_t elements) {
  FILE* file = fopen(path, "rb");
  if (!file) fail("cannot open the input file", path);
  fseek(file, 0, SEEK_END);
  long size = ftell(file);
  rewind(file);
  if (size < 0 || (size_t)size != elements * sizeof(float)) {
    fprintf(stderr, "deploy: %s holds %ld bytes, the input shape needs %zu float32 (%zu bytes)\n",
            path, size, elements, elements * sizeof(float));
    exit(1);
  }
  float* data = malloc(elements * sizeof(float));
  if (!data || fread(data, sizeof(float), elements, file) != elements) fail("cannot read", path);
  fclose(file);
  return data;
}

static void print_top_k(const float* scores, size_t count) {
  int taken[TOP_K];
  int k_max = count < TOP_K ? (int)count : TOP_K;
  printf("top-%d classes:\n", k_max);
  for (int k = 0; k < k_max; k++) {
    int best = -1;
    for (size_t i = 0; i < count; i++) {
      int used = 0;
      for (int j = 0; j < k; j++) used |= taken[j] == (int)i;
      /* Strictly greater: equal scores keep the lower class index first. */
      if (!used && (best < 0 || scores[i] > scores[best])) best = (int)i;
    }
    taken[k] = best;
    printf("  %d: class %d score %.6f\n", k + 1, best, scores[best]);
  }
}

static int compare_doubles(const void* a, const void* b) {
  double x = *(const double*)a, y = *(const double*)b;
  return (x > y) - (x < y);
}

static void print_time(const ember_api* api, ember_instance* instance, const void* const* inputs,
                       void* const* outputs, int repeat) {
  double* seconds = malloc((size_t)repeat * sizeof(double));
  if (!seconds) fail("out of memory", NULL);
  if (api->benchmark(instance, inputs, outputs, 1, repeat, MIN_REPEAT_MS, 0, seconds) != 0)
    fail("ember_benchmark failed", api->last_error());
  double sum = 0;
  for (int r = 0; r < repeat; r++) sum += seconds[r];
  qsort(seconds, (size_t)repeat, sizeof(double), compare_doubles);
  printf("time (ms) over %d repeats: mean %.4f median %.4f min %.4f max %.4f\n", repeat,
         1e3 * sum / repeat, 1e3 * seconds[repeat / 2], 1e3 * seconds[0],
         1e3 * seconds[repeat - 1]);
  free(seconds);
}

int main(int argc, char** argv) {
  if (argc < 6 || argc > 7) {
    fprintf(stderr, "usage: %s MOD_SO MOD_PARAMS INPUT_BIN INPUT_SHAPE OUTPUT_SHAPE [REPEAT]\n"
                    "  e.g. %s model/mod.so model/mod.params cat.bin 1x3x224x224 1x1000\n",
            argv[0], argv[0]);
    return 2;
  }
  size_t input_elements = shape_elements(argv[4]), output_elements = shape_elements(argv[5]);
  int repeat = argc == 7 ? atoi(argv[6]) : 10;
  if (!input_elements || !output_elements) fail("bad shape, write it like 1x3x224x224", NULL);
  if (repeat < 1) fail("REPEAT must be a positive integer", argv[6]);

  ember_api api = load_api(argv[1]);
  ember_instance* instance = api.create_from_file(argv[2]);
  if (!instance) fail("cannot create the module", api.last_error());
  printf("target: %s\n", api.target());

  float* input = read_input(argv[3], input_elements);
  float* output = calloc(output_elements, sizeof(float));
  if (!output) fail("out of memory", NULL);
  const void* inputs[1] = {input};
  void* outputs[1] = {output};
  if (api.run(instance, inputs, outputs) != 0) fail("ember_run failed", api.last_error());
  print_top_k(output, output_elements);
  print_time(&api, instance, inputs, outputs, repeat);

  api.destroy(instance);
  free(input);
  free(output);
  return 0;
}
