// The small operators of zoo::decoder_layers' step, as plain loops over raw memory:
// LayerNorm or RMSNorm of a few rows, a residual sum, and attention of one query per row and
// head over keys and values laid out (key row, head, position, width). At one
// sentence a step, each of these is a few hundred to a few thousand FMAs, and as
// ATen operators (bmm, mul_, masked_fill_, native_layer_norm, add_, copy_, and the
// views between them) they cost 5 to 15 microseconds each in dispatch and in
// waking threads: about a third of the step. Here they cost what their arithmetic
// does; only the softmax stays ATen's (one call per attention, vectorized exp).
#include "step_ops.h"

#include "product_common.h"

#include <ATen/Parallel.h>
#include <ATen/ops/_softmax.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>

#include <immintrin.h>

#include <cmath>
#include <cstring>
#include <limits>

namespace {

using zoo::common::hsum;

__attribute__((target("avx2,fma"))) inline float dot(const float* a, const float* b, int64_t n) {
  __m256 acc0 = _mm256_setzero_ps(), acc1 = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 16 <= n; i += 16) {
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
    acc1 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i + 8), _mm256_loadu_ps(b + i + 8), acc1);
  }
  for (; i + 8 <= n; i += 8)
    acc0 = _mm256_fmadd_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(b + i), acc0);
  float s = hsum(_mm256_add_ps(acc0, acc1));
  for (; i < n; ++i) s += a[i] * b[i];
  return s;
}

// y += p * x over n floats
__attribute__((target("avx2,fma"))) inline void axpy(float p, const float* x, float* y,
                                                     int64_t n) {
  const __m256 pv = _mm256_set1_ps(p);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(y + i, _mm256_fmadd_ps(pv, _mm256_loadu_ps(x + i), _mm256_loadu_ps(y + i)));
  for (; i < n; ++i) y[i] += p * x[i];
}

}  // namespace

namespace zoo::step {

__attribute__((target("avx2,fma"))) void layer_norm(const float* x, float* out, int64_t rows,
                                                    int64_t d, const Affine& a) {
  const float *weight = a.weight, *bias = a.bias;
  const double eps = a.eps;
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = out + r * d;
    // two passes: the mean, then the mean square about it (as exact as Welford here)
    __m256 s = _mm256_setzero_ps();
    int64_t i = 0;
    for (; i + 8 <= d; i += 8) s = _mm256_add_ps(s, _mm256_loadu_ps(xr + i));
    float sum = hsum(s);
    for (; i < d; ++i) sum += xr[i];
    const float mean = sum / float(d);
    const __m256 mv = _mm256_set1_ps(mean);
    s = _mm256_setzero_ps();
    for (i = 0; i + 8 <= d; i += 8) {
      const __m256 c = _mm256_sub_ps(_mm256_loadu_ps(xr + i), mv);
      s = _mm256_fmadd_ps(c, c, s);
    }
    float sq = hsum(s);
    for (; i < d; ++i) sq += (xr[i] - mean) * (xr[i] - mean);
    const float inv = 1.f / std::sqrt(sq / float(d) + float(eps));
    for (i = 0; i < d; ++i) {
      const float v = (xr[i] - mean) * inv;
      yr[i] = (weight ? v * weight[i] : v) + (bias ? bias[i] : 0.f);
    }
  }
}

__attribute__((target("avx2,fma"))) void rms_norm(const float* x, float* out, int64_t rows,
                                                  int64_t d, const float* weight, double eps) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * d;
    float* yr = out + r * d;
    const float inv = 1.f / std::sqrt(dot(xr, xr, d) / float(d) + float(eps));
    for (int64_t i = 0; i < d; ++i) yr[i] = weight ? xr[i] * inv * weight[i] : xr[i] * inv;
  }
}

__attribute__((target("avx2,fma"))) void rotate(const float* x, float* y, const float* m,
                                                int64_t width) {
  std::memset(y, 0, width * sizeof(float));
  for (int64_t i = 0; i < width; ++i) axpy(x[i], m + i * width, y, width);
}

__attribute__((target("avx2,fma"))) void add(float* a, const float* x, int64_t n) {
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    _mm256_storeu_ps(a + i, _mm256_add_ps(_mm256_loadu_ps(a + i), _mm256_loadu_ps(x + i)));
  for (; i < n; ++i) a[i] += x[i];
}

at::Tensor attend(const Attention& a) {
  const int64_t pairs = a.rows * a.heads, inner = a.heads * a.width;
  at::Tensor scores = at::empty({pairs, a.length}, at::TensorOptions().dtype(at::kFloat));
  float* sp = scores.data_ptr<float>();
  const float inf = std::numeric_limits<float>::infinity();
  auto keys_of = [&](int64_t pair) {  // the first key and value of a (row, head)
    const int64_t r = pair / a.heads, h = pair % a.heads;
    return ((r / a.groups) * a.kv_heads + h / (a.heads / a.kv_heads)) * a.stride_length *
           a.width;
  };
  // a grain of 16 (row, head) pairs: one sentence's eight heads stay on this thread
  at::parallel_for(0, pairs, 16, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r = p / a.heads, h = p % a.heads, first = keys_of(p);
      const float* q = a.q + r * a.q_stride + h * a.width;
      const bool* keep = a.keep ? a.keep + (r / a.groups) * a.keep_stride : nullptr;
      const float* bias = a.bias ? a.bias + h * a.length : nullptr;
      for (int64_t j = 0; j < a.length; ++j) {
        float score = dot(q, a.k + first + j * a.width, a.width) * a.scale;
        if (a.softcap > 0.f) score = std::tanh(score / a.softcap) * a.softcap;
        sp[p * a.length + j] = keep && !keep[j] ? -inf : score + (bias ? bias[j] : 0.f);
      }
    }
  });
  const at::Tensor probs = at::_softmax(scores, -1, false);
  const float* pp = probs.data_ptr<float>();
  at::Tensor out = at::zeros({a.rows, 1, inner}, scores.options());
  float* op = out.data_ptr<float>();
  at::parallel_for(0, pairs, 16, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      const int64_t r = p / a.heads, h = p % a.heads, first = keys_of(p);
      float* o = op + r * inner + h * a.width;
      for (int64_t j = 0; j < a.length; ++j)
        axpy(pp[p * a.length + j], a.v + first + j * a.width, o, a.width);
    }
  });
  return out;
}

}  // namespace zoo::step
