// Self-attention over packed texts of different lengths (Vaswani et al. 2017, section 3.2.1:
// softmax(Q K^T / sqrt(d_k)) V), each text's queries attending to its own keys only. The
// texts' tokens lie one after another, with no padding between them (FasterTransformer's
// "remove padding", FlashAttention's variable-length form, PyTorch's nested tensors): a text
// of L tokens costs L x L scores a head, where padding every text to the longest would cost
// the longest's square for each, and the copies in and out of the padded layout.
//
// One task is one text and one head: its keys are laid out once as (width, L), so that a
// query's L scores are sums over the width of a query value times a vector of keys (no
// horizontal sums); the scores' exponentials are taken eight at a time by exp_avx2; the
// output row is the sum of the value rows weighed by the probabilities. Measured on a 2-core
// AVX2 EPYC for all-MiniLM-L6-v2's 32 sentences of 5 to 30 words (639 tokens, 12 heads of 32):
// see docs/bench.md ("An encoder's pass in C++").
#include "step_ops.h"

#include <ATen/Parallel.h>
#include <ATen/ops/empty.h>

#include <immintrin.h>

#include <algorithm>
#include <cmath>
#include <limits>
#include <vector>

namespace {

// e^x of eight floats (Cephes' expf: x = n ln 2 + r, |r| <= ln 2 / 2, e^r by a degree-5
// polynomial, times 2^n by the exponent's bits); relative error about 2e-7, 0 below -87.
__attribute__((target("avx2,fma"))) inline __m256 exp_avx2(__m256 x) {
  const __m256 lo = _mm256_set1_ps(-87.3f);
  const __m256 under = _mm256_cmp_ps(x, lo, _CMP_LT_OQ);
  x = _mm256_min_ps(_mm256_max_ps(x, lo), _mm256_set1_ps(88.3f));
  const __m256 n = _mm256_round_ps(_mm256_mul_ps(x, _mm256_set1_ps(1.44269504088896341f)),
                                   _MM_FROUND_TO_NEAREST_INT | _MM_FROUND_NO_EXC);
  __m256 r = _mm256_fnmadd_ps(n, _mm256_set1_ps(0.693359375f), x);
  r = _mm256_fnmadd_ps(n, _mm256_set1_ps(-2.12194440e-4f), r);
  __m256 p = _mm256_set1_ps(1.9875691500e-4f);
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.3981999507e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(8.3334519073e-3f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(4.1665795894e-2f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(1.6666665459e-1f));
  p = _mm256_fmadd_ps(p, r, _mm256_set1_ps(5.0000001201e-1f));
  p = _mm256_fmadd_ps(_mm256_mul_ps(p, r), r, _mm256_add_ps(r, _mm256_set1_ps(1.f)));
  const __m256i bits = _mm256_slli_epi32(
      _mm256_add_epi32(_mm256_cvtps_epi32(n), _mm256_set1_epi32(127)), 23);
  return _mm256_andnot_ps(under, _mm256_mul_ps(p, _mm256_castsi256_ps(bits)));
}

// One text's attention for one head: rows [first, first + length) of qkv.
__attribute__((target("avx2,fma"))) void one_head(const zoo::step::PackedAttention& a,
                                                  int64_t first, int64_t length, int64_t head,
                                                  float* out, std::vector<float>& keys,
                                                  std::vector<float>& scores) {
  const int64_t w = a.width, stride = a.stride, padded = (length + 7) / 8 * 8;
  const int64_t kv_head = head / (a.heads / a.kv_heads);
  const float* q = a.qkv + first * stride + head * w;
  const float* k = a.qkv + first * stride + a.heads * w + kv_head * w;
  const float* v = a.qkv + first * stride + (a.heads + a.kv_heads) * w + kv_head * w;
  keys.assign(w * padded, 0.f);  // (width, length): keys[c * padded + j] = k_j[c]
  for (int64_t j = 0; j < length; ++j)
    for (int64_t c = 0; c < w; ++c) keys[c * padded + j] = k[j * stride + c];
  scores.resize(padded);
  const __m256 scale = _mm256_set1_ps(a.scale);
  for (int64_t i = 0; i < length; ++i) {
    const float* qi = q + i * stride;
    float* s = scores.data();
    for (int64_t j = 0; j < padded; j += 8) {
      __m256 acc = _mm256_setzero_ps();
      for (int64_t c = 0; c < w; ++c)
        acc = _mm256_fmadd_ps(_mm256_set1_ps(qi[c]), _mm256_loadu_ps(&keys[c * padded + j]),
                              acc);
      _mm256_storeu_ps(s + j, _mm256_mul_ps(acc, scale));
    }
    float top = -std::numeric_limits<float>::infinity();
    for (int64_t j = 0; j < length; ++j) top = std::max(top, s[j]);
    const __m256 shift = _mm256_set1_ps(top);
    for (int64_t j = 0; j < padded; j += 8)
      _mm256_storeu_ps(s + j, exp_avx2(_mm256_sub_ps(_mm256_loadu_ps(s + j), shift)));
    float total = 0.f;
    for (int64_t j = 0; j < length; ++j) total += s[j];
    float* o = out + (first + i) * a.heads * w + head * w;
    std::fill(o, o + w, 0.f);
    const float inv = 1.f / total;
    for (int64_t j = 0; j < length; ++j) {
      const __m256 p = _mm256_set1_ps(s[j] * inv);
      const float* vj = v + j * stride;
      int64_t c = 0;
      for (; c + 8 <= w; c += 8)
        _mm256_storeu_ps(o + c, _mm256_fmadd_ps(p, _mm256_loadu_ps(vj + c),
                                                _mm256_loadu_ps(o + c)));
      for (; c < w; ++c) o[c] += s[j] * inv * vj[c];
    }
  }
}

}  // namespace

namespace zoo::step {

at::Tensor attend_packed(const PackedAttention& a) {
  at::Tensor out = at::empty({a.rows, 1, a.heads * a.width}, at::kFloat);
  float* o = out.data_ptr<float>();
  const int64_t tasks = a.texts * a.heads;
  at::parallel_for(0, tasks, 1, [&](int64_t begin, int64_t end) {
    std::vector<float> keys, scores;  // this thread's, reused across its tasks
    for (int64_t task = begin; task < end; ++task) {
      const int64_t text = task / a.heads, head = task % a.heads;
      const int64_t length = a.starts[text + 1] - a.starts[text];
      if (length > 0) one_head(a, a.starts[text], length, head, o, keys, scores);
    }
  });
  return out;
}

}  // namespace zoo::step
