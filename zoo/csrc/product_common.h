// What zoo's native products share: a vector's horizontal sum, the output and bias of a
// product x W^T + b, and the order in which the panel products walk rows and panels
// (skinny_linear.cpp, packed_linear.cpp, int8_linear.cpp, step_ops.cpp).
#pragma once

#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/Version.h>
#include <ATen/ops/empty.h>
#include <c10/util/Exception.h>

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <optional>
#include <type_traits>
#include <vector>

namespace zoo::common {

// True where the CPU has AVX-512 (F) and PyTorch dispatches to it: ATEN_CPU_CAPABILITY=avx2
// (zoo bench --isa avx2) keeps zoo's products on their AVX2 kernels too. Read once.
inline bool avx512() {
  static const bool on = __builtin_cpu_supports("avx512f") &&
                         at::get_cpu_capability().rfind("AVX512", 0) == 0;
  return on;
}

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

// f(std::integral_constant<int, mr>{}) for a block of mr rows (1 to MAX, at most 6; more run
// as MAX): the kernels' row counts are template arguments, none above MAX made.
template <int MAX = 6, class F>
inline void with_rows(int64_t mr, const F& f) {
  static_assert(1 <= MAX && MAX <= 6, "blocks of 1 to 6 rows");
  switch (mr) {
    case 1: return f(std::integral_constant<int, 1>{});
    case 2: return f(std::integral_constant<int, std::min(2, MAX)>{});
    case 3: return f(std::integral_constant<int, std::min(3, MAX)>{});
    case 4: return f(std::integral_constant<int, std::min(4, MAX)>{});
    case 5: return f(std::integral_constant<int, std::min(5, MAX)>{});
    default: return f(std::integral_constant<int, MAX>{});
  }
}

// Panels [p0, p1) of a product of n_out outputs, NP at a time, then one at a time:
// f(std::integral_constant<int, np>{}, the group's first panel, the outputs of its last
// panel: 16, fewer only in the product's last).
template <int NP, class F>
inline void over_groups(int64_t p0, int64_t p1, int64_t n_out, const F& f) {
  const int64_t panels = (n_out + 15) / 16;
  auto cols = [&](int64_t p, int np) {
    return p + np == panels ? n_out - (panels - 1) * 16 : int64_t(16);
  };
  int64_t p = p0;
  for (; p + NP <= p1; p += NP) f(std::integral_constant<int, NP>{}, p, cols(p, NP));
  for (; p < p1; ++p) f(std::integral_constant<int, 1>{}, p, cols(p, 1));
}

// The schedule of a product over panels of 16 outputs: rows in blocks of at most max_rows
// (six unless a product says), as even as they can be; tasks of ``per_task`` panels over
// the threads; block(m, mr, p0, p1) multiplies mr rows from row m by panels [p0, p1). With
// more than one block of rows, a panel at a time goes through every block: it stays in L2
// between them. ``group`` panels at a time go through the blocks (the last group may be
// shorter).
template <class Block>
void over_panels(int64_t rows, int64_t n_out, int64_t per_task, const Block& block,
                 int64_t group = 1, int64_t max_rows = 6) {
  const int64_t blocks = (rows + max_rows - 1) / max_rows, base = rows / blocks,
                longer = rows % blocks;
  const int64_t panels = (n_out + 15) / 16, tasks = (panels + per_task - 1) / per_task;
  at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p0 = t * per_task, p1 = std::min(panels, p0 + per_task);
      if (blocks == 1) {
        block(0, rows, p0, p1);
        continue;
      }
      for (int64_t p = p0; p < p1; p += group)
        for (int64_t i = 0, m = 0; i < blocks; ++i) {
          const int64_t mr = base + (i < longer);
          block(m, mr, p, std::min(p1, p + group));
          m += mr;
        }
    }
  });
}

// The whole schedule of a product: its blocks of at most MAX_ROWS rows and tasks of panels
// (over_panels), each block's rows a template argument (with_rows), its panels
// Panels::of(MR) at a time (over_groups); kernel(rows, panels, m, p, cols) with rows and
// panels std::integral_constants.
template <class Panels, int MAX_ROWS = 6, class Kernel>
void schedule(int64_t rows, int64_t n_out, int64_t per_task, int64_t group,
              const Kernel& kernel) {
  over_panels(
      rows, n_out, per_task,
      [&](int64_t m, int64_t mr, int64_t p0, int64_t p1) {
        with_rows<MAX_ROWS>(mr, [&](auto rows_c) {
          over_groups<Panels::of(decltype(rows_c)::value)>(
              p0, p1, n_out, [&](auto panels_c, int64_t p, int64_t cols) {
                kernel(rows_c, panels_c, m, p, cols);
              });
        });
      },
      group, MAX_ROWS);
}

}  // namespace zoo::common
