// Where a matrix product's register tile loses time on this CPU, and what software
// prefetch of the streamed weights buys: the measurement behind the C backend's
// prefetch (ember/codegen/c.py, PREFETCH_AHEAD_BYTES), not a benchmark of Ember.
//
//   clang-19 -O3 -march=native -ffp-contract=fast -fopenmp -w benchmarks/dense_tile.c -o /tmp/dense_tile
//   OMP_NUM_THREADS=2 KMP_BLOCKTIME=1 /tmp/dense_tile [M N K] [repeat]
//
// The tile is Ember's default for ViT-B/16's dense products: 8 rows x 3 vectors of 16
// fp32 accumulators (AVX-512), each k one broadcast of the activation per row and one
// load per vector of the weights packed [N/16][K][16], the whole K in one pass, tiles
// in one parallel loop with the rows' tiles inside (each weight panel read from L2 by
// all of them). Printed, the fp32 GFLOP/s of:
//   - one tile over K = 256 and K = K, repeated on one thread (its operands in L1 / L2);
//   - the whole product, 2 threads, weights warm (the last run's, in L2/L3) or cold
//     (64 MiB written between runs, as the other layers' weights do in a network);
// each without prefetch and prefetching every weight vector D = 8, 16, 32 k ahead.
// Default shape: ViT-B/16's MLP output, M 197, N 768, K 3072. benchmarks/peak.py gives
// the FMA peak to divide by.

#include <immintrin.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>

#define MR 8
#define NV 3
static int M = 197, N = 768, K = 3072;

static double now(void) {
  struct timespec t;
  clock_gettime(CLOCK_MONOTONIC, &t);
  return t.tv_sec + 1e-9 * t.tv_nsec;
}

// B packed [N/16][K][16]: vector v of column tile jt at k.
static inline const float* weights(const float* B, int jt, int v, int k) {
  return B + ((size_t)(jt * NV + v) * K + k) * 16;
}

// One 8 x 48 tile of C = A B over k in [0, kk), prefetching `ahead` k steps ahead. Full
// tiles run a loop of constant trip counts, so the accumulators stay in registers.
static void tile(const float* A, const float* B, float* C, int it, int jt, int kk, int ahead) {
  __m512 acc[MR][NV];
  int rows = M - it * MR < MR ? M - it * MR : MR;
  for (int i = 0; i < MR; i++)
    for (int v = 0; v < NV; v++) acc[i][v] = _mm512_setzero_ps();
  const float* a = A + (size_t)it * MR * K;
  if (rows == MR) {
    for (int k = 0; k < kk; k++) {
      __m512 b[NV];
#pragma unroll
      for (int v = 0; v < NV; v++) {
        if (ahead) _mm_prefetch((const char*)weights(B, jt, v, k + ahead), _MM_HINT_T0);
        b[v] = _mm512_loadu_ps(weights(B, jt, v, k));
      }
#pragma unroll
      for (int i = 0; i < MR; i++) {
        __m512 x = _mm512_set1_ps(a[(size_t)i * K + k]);
#pragma unroll
        for (int v = 0; v < NV; v++) acc[i][v] = _mm512_fmadd_ps(x, b[v], acc[i][v]);
      }
    }
  } else {  // the last rows' tile
    for (int k = 0; k < kk; k++)
      for (int i = 0; i < rows; i++)
        for (int v = 0; v < NV; v++)
          acc[i][v] = _mm512_fmadd_ps(_mm512_set1_ps(a[(size_t)i * K + k]),
                                      _mm512_loadu_ps(weights(B, jt, v, k)), acc[i][v]);
  }
  for (int i = 0; i < rows; i++)
    for (int v = 0; v < NV; v++)
      _mm512_storeu_ps(C + (size_t)(it * MR + i) * N + jt * 16 * NV + v * 16, acc[i][v]);
}

static void product(const float* A, const float* B, float* C, int ahead) {
  int row_tiles = (M + MR - 1) / MR, column_tiles = N / (16 * NV);
#pragma omp parallel for schedule(static)
  for (int t = 0; t < row_tiles * column_tiles; t++)
    tile(A, B, C, t % row_tiles, t / row_tiles, K, ahead);
}

static int by_value(const void* x, const void* y) {
  double a = *(const double*)x, b = *(const double*)y;
  return (a > b) - (a < b);
}

int main(int argc, char** argv) {
  if (argc >= 4) M = atoi(argv[1]), N = atoi(argv[2]), K = atoi(argv[3]);
  int repeat = argc >= 5 ? atoi(argv[4]) : 40;
  if (N % (16 * NV) || M < 1 || K < 256 || repeat < 1) {
    fprintf(stderr, "N must be a multiple of %d, M >= 1, K >= 256\n", 16 * NV);
    return 1;
  }
  float* A = aligned_alloc(64, sizeof(float) * M * K);
  float* B = aligned_alloc(64, sizeof(float) * N * K + 4096);  // prefetches run past K
  float* C = aligned_alloc(64, sizeof(float) * M * N);
  size_t evict_bytes = (size_t)64 << 20;
  char* evict = malloc(evict_bytes);
  srand(1);
  for (size_t i = 0; i < (size_t)M * K; i++) A[i] = rand() / (float)RAND_MAX - 0.5f;
  for (size_t i = 0; i < (size_t)N * K; i++) B[i] = rand() / (float)RAND_MAX - 0.5f;
  double* times = malloc(sizeof(double) * repeat);
  const int distances[] = {0, 8, 16, 32};
  printf("M %d, N %d, K %d: tile %d x %d, GFLOP/s (median of %d)\n", M, N, K, MR, 16 * NV,
         repeat);
  printf("%-22s %10s %10s %10s %10s\n", "", "no prefetch", "D 8", "D 16", "D 32");
  for (int mode = 0; mode < 4; mode++) {
    const char* names[] = {"tile, K 256, 1 thread", "tile, K, 1 thread", "whole, warm",
                           "whole, cold"};
    printf("%-22s", names[mode]);
    for (int d = 0; d < 4; d++) {
      int ahead = distances[d];
      for (int r = 0; r < repeat; r++) {
        if (mode == 3) memset(evict, r, evict_bytes);
        double start = now(), flops;
        if (mode < 2) {
          int kk = mode == 0 ? 256 : K, calls = mode == 0 ? 200 : 20;
          for (int c = 0; c < calls; c++) tile(A, B, C, 0, 0, kk, ahead);
          flops = 2.0 * MR * 16 * NV * kk * calls;
        } else {
          product(A, B, C, ahead);
          flops = 2.0 * M * N * K;
        }
        times[r] = flops / (now() - start) * 1e-9;
      }
      qsort(times, repeat, sizeof(double), by_value);
      printf(" %10.1f", times[repeat / 2]);
    }
    printf("\n");
  }
  return 0;
}
