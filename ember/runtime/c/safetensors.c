/* Reading a model's params from a safetensors file (mod.params) with no dependencies.
 *
 * The format: 8 bytes little-endian header length N, N bytes of JSON
 * {"name": {"dtype": "F32", "shape": [..], "data_offsets": [begin, end]}, ...,
 *  "__metadata__": {...}}, then the data, offsets relative to the byte after the
 * header. This reader walks exactly that shape of JSON (skipping anything else), finds
 * each param of the model by name, checks dtype, shape and size, and copies the data
 * into one block, each tensor at a 64-byte aligned offset (the file's own offsets are
 * only 8-byte aligned). */

#include <errno.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/types.h>

#define MAX_RANK 16
#define MAX_KEY 512
#define MAX_HEADER (100u << 20) /* the safetensors format's own limit */

typedef struct {
  const char* text;
  size_t length;
  size_t position;
} cursor;

typedef struct {
  int found;
  char dtype[16];
  int32_t ndim;
  int64_t shape[MAX_RANK];
  int64_t offsets[2];
} entry;

static void skip_space(cursor* c) {
  while (c->position < c->length && strchr(" \t\r\n", c->text[c->position]) != NULL) {
    ++c->position;
  }
}

/* Consumes `expected` (after blanks); 0 if it was there. */
static int take(cursor* c, char expected) {
  skip_space(c);
  if (c->position >= c->length || c->text[c->position] != expected) return -1;
  ++c->position;
  return 0;
}

static int peek(cursor* c) {
  skip_space(c);
  return c->position < c->length ? c->text[c->position] : -1;
}

/* A JSON string into `out` (simple escapes decoded, \u left as is, truncated to fit). */
static int read_string(cursor* c, char* out, size_t out_size) {
  if (take(c, '"') != 0) return -1;
  size_t used = 0;
  while (c->position < c->length) {
    char ch = c->text[c->position++];
    if (ch == '"') {
      out[used] = '\0';
      return 0;
    }
    if (ch == '\\' && c->position < c->length) {
      char escaped = c->text[c->position++];
      const char* from = "\"\\/bfnrt";
      const char* to = "\"\\/\b\f\n\r\t";
      const char* where = strchr(from, escaped);
      ch = where != NULL ? to[where - from] : escaped;
    }
    if (used + 1 < out_size) out[used++] = ch;
  }
  return -1;
}

static int read_integer(cursor* c, int64_t* value) {
  skip_space(c);
  const char* start = c->text + c->position;
  char* end = NULL;
  errno = 0;
  long long parsed = strtoll(start, &end, 10);
  if (end == start || errno != 0) return -1;
  c->position += (size_t)(end - start);
  *value = (int64_t)parsed;
  return 0;
}

/* [int, int, ...] into values (at most `capacity`); *count is how many there were. */
static int read_integers(cursor* c, int64_t* values, int32_t capacity, int32_t* count) {
  *count = 0;
  if (take(c, '[') != 0) return -1;
  if (peek(c) == ']') return take(c, ']');
  for (;;) {
    int64_t value;
    if (read_integer(c, &value) != 0 || *count >= capacity) return -1;
    values[(*count)++] = value;
    if (peek(c) == ']') return take(c, ']');
    if (take(c, ',') != 0) return -1;
  }
}

/* Skips any JSON value: a string, a nested object or array, a number or a literal. */
static int skip_value(cursor* c) {
  char scratch[8];
  int next = peek(c);
  if (next == '"') return read_string(c, scratch, sizeof scratch);
  if (next != '{' && next != '[') {
    while (c->position < c->length && strchr(",}] \t\r\n", c->text[c->position]) == NULL) {
      ++c->position;
    }
    return 0;
  }
  int depth = 0;
  while (c->position < c->length) {
    char ch = c->text[c->position];
    if (ch == '"') {
      if (read_string(c, scratch, sizeof scratch) != 0) return -1;
      continue;
    }
    ++c->position;
    if (ch == '{' || ch == '[') ++depth;
    if ((ch == '}' || ch == ']') && --depth == 0) return 0;
  }
  return -1;
}

/* {"dtype": .., "shape": [..], "data_offsets": [..]} in any order, other keys skipped. */
static int read_entry(cursor* c, entry* e) {
  if (take(c, '{') != 0) return -1;
  if (peek(c) == '}') return take(c, '}');
  for (;;) {
    char key[32];
    int32_t count = 0;
    if (read_string(c, key, sizeof key) != 0 || take(c, ':') != 0) return -1;
    int status;
    if (strcmp(key, "dtype") == 0) {
      status = read_string(c, e->dtype, sizeof e->dtype);
    } else if (strcmp(key, "shape") == 0) {
      status = read_integers(c, e->shape, MAX_RANK, &e->ndim);
    } else if (strcmp(key, "data_offsets") == 0) {
      status = read_integers(c, e->offsets, 2, &count) || count != 2;
    } else {
      status = skip_value(c);
    }
    if (status != 0) return -1;
    if (peek(c) == '}') break;
    if (take(c, ',') != 0) return -1;
  }
  e->found = 1;
  return take(c, '}');
}

/* Fills entries[i] for every model param named in the header; -1 if it is not JSON of
 * the expected shape. */
static int read_header(cursor* c, const ember_model_info* model, entry* entries) {
  if (take(c, '{') != 0) return -1;
  if (peek(c) == '}') return 0;
  for (;;) {
    char key[MAX_KEY];
    if (read_string(c, key, sizeof key) != 0 || take(c, ':') != 0) return -1;
    int32_t index = -1;
    for (int32_t i = 0; i < model->num_params && index < 0; ++i) {
      if (strcmp(model->params[i].name, key) == 0) index = i;
    }
    if ((index >= 0 ? read_entry(c, &entries[index]) : skip_value(c)) != 0) return -1;
    if (peek(c) == '}') return 0;
    if (take(c, ',') != 0) return -1;
  }
}

static void describe(char* out, size_t size, const char* dtype, const int64_t* shape,
                     int32_t ndim) {
  int used = snprintf(out, size, "%s[", dtype);
  for (int32_t i = 0; i < ndim && used > 0 && (size_t)used < size; ++i) {
    used += snprintf(out + used, size - (size_t)used, i ? ", %lld" : "%lld", (long long)shape[i]);
  }
  if (used > 0 && (size_t)used < size) snprintf(out + used, size - (size_t)used, "]");
}

/* Whether the file's entry is the param the library needs; sets the error if not. */
static int check_entry(const char* path, const ember_tensor_spec* spec, const entry* e,
                       int64_t data_bytes) {
  char wanted[256], found[256];
  describe(wanted, sizeof wanted, spec->dtype, spec->shape, spec->ndim);
  if (!e->found) {
    ember_set_error("%s has no tensor '%s' (%s): use the mod.params exported with this library",
                    path, spec->name, wanted);
    return -1;
  }
  describe(found, sizeof found, e->dtype, e->shape, e->ndim);
  int same = strcmp(e->dtype, spec->dtype) == 0 && e->ndim == spec->ndim;
  for (int32_t i = 0; same && i < spec->ndim; ++i) same = e->shape[i] == spec->shape[i];
  if (!same) {
    ember_set_error("%s: tensor '%s' is %s, the library needs %s: use the mod.params exported "
                    "with this library", path, spec->name, found, wanted);
    return -1;
  }
  int64_t begin = e->offsets[0], end = e->offsets[1];
  if (begin < 0 || end < begin || end - begin != (int64_t)spec->nbytes || end > data_bytes) {
    ember_set_error("%s: tensor '%s' has bad data_offsets [%lld, %lld] for %zu bytes in a "
                    "data section of %lld bytes: the file is truncated or corrupt", path,
                    spec->name, (long long)begin, (long long)end, spec->nbytes,
                    (long long)data_bytes);
    return -1;
  }
  return 0;
}

/* The header length and the JSON header itself (NUL-terminated, to free). */
static char* load_header(FILE* file, const char* path, uint64_t* header_bytes) {
  unsigned char size[8];
  if (fread(size, 1, 8, file) != 8) {
    ember_set_error("%s is not a safetensors file: shorter than its 8-byte header length", path);
    return NULL;
  }
  *header_bytes = 0;
  for (int i = 7; i >= 0; --i) *header_bytes = (*header_bytes << 8) | size[i];
  if (*header_bytes == 0 || *header_bytes > MAX_HEADER) {
    ember_set_error("%s is not a safetensors file: header length %llu", path,
                    (unsigned long long)*header_bytes);
    return NULL;
  }
  char* header = malloc(*header_bytes + 1);
  if (header == NULL || fread(header, 1, *header_bytes, file) != *header_bytes) {
    ember_set_error("%s: cannot read its %llu-byte header (truncated file?)", path,
                    (unsigned long long)*header_bytes);
    free(header);
    return NULL;
  }
  header[*header_bytes] = '\0';
  return header;
}

static size_t aligned(size_t nbytes) {
  return (nbytes + EMBER_ALIGNMENT - 1) / EMBER_ALIGNMENT * EMBER_ALIGNMENT;
}

/* Checks every entry, then copies each param's bytes into one new aligned block. */
static int load_params(FILE* file, const char* path, const ember_model_info* model,
                       const entry* entries, uint64_t header_bytes, void** block,
                       const void** params) {
  if (fseeko(file, 0, SEEK_END) != 0) {
    ember_set_error("cannot seek in params file %s: %s", path, strerror(errno));
    return -1;
  }
  int64_t data_bytes = (int64_t)ftello(file) - 8 - (int64_t)header_bytes;
  size_t total = 0;
  for (int32_t i = 0; i < model->num_params; ++i) {
    if (check_entry(path, &model->params[i], &entries[i], data_bytes) != 0) return -1;
    total += aligned(model->params[i].nbytes);
  }
  unsigned char* data = ember_alloc_block(total);
  if (data == NULL) {
    ember_set_error("out of memory reading %zu bytes of params from %s", total, path);
    return -1;
  }
  *block = data;
  size_t offset = 0;
  for (int32_t i = 0; i < model->num_params; ++i) {
    size_t nbytes = model->params[i].nbytes;
    off_t where = (off_t)(8 + header_bytes + (uint64_t)entries[i].offsets[0]);
    if (fseeko(file, where, SEEK_SET) != 0 || fread(data + offset, 1, nbytes, file) != nbytes) {
      ember_set_error("%s: cannot read tensor '%s' (truncated file?)", path,
                      model->params[i].name);
      return -1;
    }
    params[i] = data + offset;
    offset += aligned(nbytes);
  }
  return 0;
}

int32_t ember_read_safetensors(const char* path, const ember_model_info* model, void** block,
                               const void** params) {
  FILE* file = fopen(path, "rb");
  if (file == NULL) {
    ember_set_error("cannot open params file %s: %s", path, strerror(errno));
    return -1;
  }
  uint64_t header_bytes = 0;
  char* header = load_header(file, path, &header_bytes);
  entry* entries = calloc(model->num_params ? (size_t)model->num_params : 1, sizeof *entries);
  int32_t status = -1;
  if (header != NULL && entries != NULL) {
    cursor c = {header, header_bytes, 0};
    if (read_header(&c, model, entries) != 0) {
      ember_set_error("%s: the safetensors header is not valid JSON of the expected form "
                      "(near byte %zu)", path, c.position);
    } else {
      status = load_params(file, path, model, entries, header_bytes, block, params);
    }
  }
  free(entries);
  free(header);
  fclose(file);
  return status;
}
