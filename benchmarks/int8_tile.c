// How fast an int8 register tile can be on this CPU, against the fp32 tile Ember's
// kernels use: the measurement behind issue 17's plan (int8 kernels as a dot-product
// micro-kernel), not a benchmark of Ember itself.
//
//   gcc -O3 -march=native -fopenmp benchmarks/int8_tile.c -o /tmp/int8_tile
//   OMP_NUM_THREADS=2 /tmp/int8_tile
//
// Both tiles are 6 pixels x 32 output channels over ResNet-50's 1x1 (and one 3x3, as
// K = 9 x 256) shapes: the int8 one with AVX-512 VNNI (`vpdpbusd`: uint8 x int8, four
// products summed into each int32 lane), weights packed [N/32][K/4][32][4], then the
// float requantization (bias, scale, round to nearest even, zero point, saturate to
// uint8); the fp32 one with FMAs. Needs a CPU with AVX512_VNNI.

#include <immintrin.h>
#include <stdint.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <time.h>
#include <omp.h>
#define R 6  // rows (pixels) per tile
static double now(void) { struct timespec t; clock_gettime(CLOCK_MONOTONIC, &t); return t.tv_sec + 1e-9 * t.tv_nsec; }

// A: uint8 [M][K]; B packed int8 [N/32][K/4][32][4]; out uint8 [M][N]
static void qgemm(int M, int N, int K, const uint8_t* A, const int8_t* B, const int32_t* bias,
                  const float* scale, int zp, uint8_t* out) {
  #pragma omp parallel for collapse(2) schedule(static)
  for (int nb = 0; nb < N / 32; nb++)
    for (int m0 = 0; m0 < M; m0 += R) {
      __m512i acc[R][2];
      for (int r = 0; r < R; r++) { acc[r][0] = _mm512_setzero_si512(); acc[r][1] = _mm512_setzero_si512(); }
      const int8_t* b = B + (size_t)nb * (K / 4) * 128;
      for (int k4 = 0; k4 < K / 4; k4++) {
        __m512i b0 = _mm512_loadu_si512(b + k4 * 128), b1 = _mm512_loadu_si512(b + k4 * 128 + 64);
        for (int r = 0; r < R && m0 + r < M; r++) {
          __m512i a = _mm512_set1_epi32(*(const int32_t*)(A + (size_t)(m0 + r) * K + 4 * k4));
          acc[r][0] = _mm512_dpbusd_epi32(acc[r][0], a, b0);
          acc[r][1] = _mm512_dpbusd_epi32(acc[r][1], a, b1);
        }
      }
      for (int r = 0; r < R && m0 + r < M; r++)
        for (int j = 0; j < 2; j++) {
          int n = nb * 32 + j * 16;
          __m512i v = _mm512_add_epi32(acc[r][j], _mm512_loadu_si512(bias + n));
          __m512 f = _mm512_mul_ps(_mm512_cvtepi32_ps(v), _mm512_loadu_ps(scale + n));
          __m512i q = _mm512_add_epi32(_mm512_cvtps_epi32(f), _mm512_set1_epi32(zp));
          _mm_storeu_si128((__m128i*)(out + (size_t)(m0 + r) * N + n), _mm512_cvtusepi32_epi8(_mm512_max_epi32(q, _mm512_setzero_si512())));
        }
    }
}

static void sgemm(int M, int N, int K, const float* A, const float* B, float* out) {
  #pragma omp parallel for collapse(2) schedule(static)
  for (int nb = 0; nb < N / 32; nb++)
    for (int m0 = 0; m0 < M; m0 += R) {
      __m512 acc[R][2];
      for (int r = 0; r < R; r++) { acc[r][0] = _mm512_setzero_ps(); acc[r][1] = _mm512_setzero_ps(); }
      const float* b = B + (size_t)nb * K * 32;
      for (int k = 0; k < K; k++) {
        __m512 b0 = _mm512_loadu_ps(b + k * 32), b1 = _mm512_loadu_ps(b + k * 32 + 16);
        for (int r = 0; r < R && m0 + r < M; r++) {
          __m512 a = _mm512_set1_ps(A[(size_t)(m0 + r) * K + k]);
          acc[r][0] = _mm512_fmadd_ps(a, b0, acc[r][0]);
          acc[r][1] = _mm512_fmadd_ps(a, b1, acc[r][1]);
        }
      }
      for (int r = 0; r < R && m0 + r < M; r++) {
        _mm512_storeu_ps(out + (size_t)(m0 + r) * N + nb * 32, acc[r][0]);
        _mm512_storeu_ps(out + (size_t)(m0 + r) * N + nb * 32 + 16, acc[r][1]);
      }
    }
}

int main(int argc, char** argv) {
  int shapes[][3] = {{3136, 256, 64}, {3136, 64, 256}, {784, 512, 128}, {196, 1024, 256}, {49, 2048, 512}, {196, 256, 2304}};
  for (int s = 0; s < 6; s++) {
    int M = shapes[s][0], N = shapes[s][1], K = shapes[s][2];
    uint8_t* A = aligned_alloc(64, (size_t)M * K + 64); int8_t* B = aligned_alloc(64, (size_t)N * K + 64);
    float* Af = aligned_alloc(64, 4 * ((size_t)M * K + 64)); float* Bf = aligned_alloc(64, 4 * ((size_t)N * K + 64));
    int32_t* bias = aligned_alloc(64, 4 * N); float* scale = aligned_alloc(64, 4 * N);
    uint8_t* out = aligned_alloc(64, (size_t)M * N + 64); float* outf = aligned_alloc(64, 4 * (size_t)M * N + 64);
    for (size_t i = 0; i < (size_t)M * K; i++) { A[i] = rand() & 255; Af[i] = A[i]; }
    for (size_t i = 0; i < (size_t)N * K; i++) { B[i] = (rand() & 255) - 128; Bf[i] = B[i]; }
    for (int i = 0; i < N; i++) { bias[i] = 0; scale[i] = 1e-4f; }
    double best_q = 1e9, best_f = 1e9;
    for (int rep = 0; rep < 30; rep++) {
      double t = now(); qgemm(M, N, K, A, B, bias, scale, 3, out); t = now() - t; if (t < best_q) best_q = t;
      t = now(); sgemm(M, N, K, Af, Bf, outf); t = now() - t; if (t < best_f) best_f = t;
    }
    double ops = 2.0 * M * N * K;
    printf("M=%5d N=%5d K=%5d  int8 %.1f GOP/s (%.3f ms)  fp32 %.1f GFLOP/s (%.3f ms)  speedup %.2fx\n",
           M, N, K, ops / best_q * 1e-9, best_q * 1e3, ops / best_f * 1e-9, best_f * 1e3, best_f / best_q);
  }
  return 0;
}
