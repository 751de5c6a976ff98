// zoo::skinny_linear: y = x W^T + b for a few rows of x, reading W once at the
// memory's rate. Decoding one sentence multiplies one row (or one per beam) by
// every weight of the decoder at each step, so its products are bound by reading
// the weights; this kernel streams each thread's share of W's rows in order and
// keeps x in L1. zoo/native.py compiles it on first use; docs/bench.md measures it.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "product_common.h"
#include "skinny_linear.h"

#include <immintrin.h>

#include <cstdint>

namespace {

using zoo::common::hsum;

// R rows of W (from w, stride n) against M rows of x (from x, stride n): out[m][r].
template <int R, int M>
__attribute__((target("avx2,fma"))) inline void dot_block(const float* w, const float* x,
                                                          int64_t n, float out[M][R]) {
  __m256 acc[M][R];
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) acc[m][r] = _mm256_setzero_ps();
  int64_t i = 0;
  for (; i + 8 <= n; i += 8) {
    __m256 wv[R];
    for (int r = 0; r < R; ++r) wv[r] = _mm256_loadu_ps(w + r * n + i);
    for (int m = 0; m < M; ++m) {
      const __m256 xv = _mm256_loadu_ps(x + m * n + i);
      for (int r = 0; r < R; ++r) acc[m][r] = _mm256_fmadd_ps(wv[r], xv, acc[m][r]);
    }
  }
  for (int m = 0; m < M; ++m)
    for (int r = 0; r < R; ++r) {
      float s = hsum(acc[m][r]);
      for (int64_t j = i; j < n; ++j) s += w[r * n + j] * x[m * n + j];
      out[m][r] = s;
    }
}

// Rows [o0, o1) of the output for all M rows of x, R rows of W at a time.
template <int R>
__attribute__((target("avx2,fma"))) void rows(const float* W, const float* x, const float* b,
                                              float* y, int64_t rows_x, int64_t n, int64_t n_out,
                                              int64_t o0, int64_t o1) {
  for (int64_t o = o0; o < o1; o += R) {
    const float* w = W + o * n;
    int64_t m = 0;
    for (; m + 2 <= rows_x; m += 2) {
      float out[2][R];
      dot_block<R, 2>(w, x + m * n, n, out);
      for (int mm = 0; mm < 2; ++mm)
        for (int r = 0; r < R; ++r) y[(m + mm) * n_out + o + r] = out[mm][r] + (b ? b[o + r] : 0.f);
    }
    if (m < rows_x) {
      float out[1][R];
      dot_block<R, 1>(w, x + m * n, n, out);
      for (int r = 0; r < R; ++r) y[m * n_out + o + r] = out[0][r] + (b ? b[o + r] : 0.f);
    }
  }
}

}  // namespace

namespace zoo {

at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias) {
  TORCH_CHECK_VALUE(x.device().is_cpu() && weight.device().is_cpu(),
                    "skinny_linear: CPU tensors only");
  TORCH_CHECK_VALUE(x.scalar_type() == at::kFloat && weight.scalar_type() == at::kFloat,
                    "skinny_linear: float32 only");
  TORCH_CHECK_VALUE(weight.dim() == 2 && weight.is_contiguous(),
                    "skinny_linear: a contiguous 2-d weight");
  const int64_t n = weight.size(1), n_out = weight.size(0);
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == n, "skinny_linear: x's last size ",
                    x.dim() ? x.size(-1) : 0, " is not weight's ", n);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = common::product_output(x, n_out);
  const float* b = common::bias_data(bias, n_out, "skinny_linear");
  if (n == 0) return common::bias_only(y, bias);
  const int64_t rows_x = xc.numel() / n;
  const float *W = weight.data_ptr<float>(), *xp = xc.data_ptr<float>();
  float* yp = y.data_ptr<float>();
  // one row: eight rows of W at a time (eight streams); more: four, against two of x
  const int64_t step = rows_x == 1 ? 8 : 4, blocks = n_out / step;
  at::parallel_for(0, blocks, 32 / step, [&](int64_t s, int64_t e) {
    if (step == 8)
      rows<8>(W, xp, b, yp, rows_x, n, n_out, s * 8, e * 8);
    else
      rows<4>(W, xp, b, yp, rows_x, n, n_out, s * 4, e * 4);
  });
  rows<1>(W, xp, b, yp, rows_x, n, n_out, blocks * step, n_out);
  return y;
}

bool avx2_fma() { return __builtin_cpu_supports("avx2") && __builtin_cpu_supports("fma"); }

}  // namespace zoo

TORCH_LIBRARY_FRAGMENT(zoo, m) {
  m.def("skinny_linear(Tensor x, Tensor weight, Tensor? bias) -> Tensor");
  m.def("cpu_has_avx2_fma() -> bool", [] { return zoo::avx2_fma(); });
  // the instruction set zoo's fp32 packed products run on here (packed_linear.cpp)
  m.def("product_isa() -> str",
        [] { return std::string(zoo::common::avx512() ? "AVX-512" : "AVX2"); });
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) { m.impl("skinny_linear", zoo::skinny_linear); }
