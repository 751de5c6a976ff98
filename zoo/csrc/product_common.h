// What zoo's native products share: a vector's horizontal sum, and the output and bias of a
// product x W^T + b (skinny_linear.cpp, packed_linear.cpp, step_ops.cpp).
#pragma once

#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <immintrin.h>

#include <cstdint>
#include <optional>
#include <vector>

namespace zoo::common {

// The sum of a vector's eight floats.
__attribute__((target("avx2,fma"))) inline float hsum(__m256 v) {
  __m128 s = _mm_add_ps(_mm256_castps256_ps128(v), _mm256_extractf128_ps(v, 1));
  s = _mm_add_ps(s, _mm_movehl_ps(s, s));
  s = _mm_add_ss(s, _mm_movehdup_ps(s));
  return _mm_cvtss_f32(s);
}

// The output of x W^T + b: x's shape with n_out last (not yet written).
inline at::Tensor product_output(const at::Tensor& x, int64_t n_out) {
  std::vector<int64_t> shape(x.sizes().begin(), x.sizes().end());
  shape.back() = n_out;
  return at::empty(shape, x.options());
}

// The bias's floats, or null without one; ``op`` names the operator in the error.
inline const float* bias_data(const std::optional<at::Tensor>& bias, int64_t n_out,
                              const char* op) {
  if (!bias.has_value() || !bias->defined()) return nullptr;
  TORCH_CHECK_VALUE(bias->device().is_cpu() && bias->scalar_type() == at::kFloat &&
                        bias->dim() == 1 && bias->numel() == n_out && bias->is_contiguous(),
                    op, ": bias is a contiguous float32 CPU vector of ", n_out, " values");
  return bias->data_ptr<float>();
}

// y = b for a product over no inputs (an empty sum), or 0 without a bias.
inline at::Tensor bias_only(at::Tensor& y, const std::optional<at::Tensor>& bias) {
  return bias.has_value() && bias->defined() ? y.copy_(*bias) : y.zero_();
}

}  // namespace zoo::common
