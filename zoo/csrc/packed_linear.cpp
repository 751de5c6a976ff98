// zoo::packed_linear: y = x W^T + b for one to a few hundred rows of x, with W packed
// once into panels of 16 output columns (zoo::pack_linear_weight). A panel holds, for
// each input column k, the 16 weights of its outputs side by side, so that a product
// is a register-blocked outer product: each step of k loads two vectors of the panel,
// broadcasts one value of each of up to six rows of x and adds twelve FMAs into
// accumulators that stay in registers (the micro-kernel of BLIS and of every BLAS:
// Van Zee and van de Geijn, "BLIS: A Framework for Rapidly Instantiating BLAS
// Functionality", 2015). At one row it reads four panels at once, four streams at
// the memory's rate; measured on a 2-core AVX2 EPYC, it reached 40-80% of the matmul
// peak at sixteen rows and 70-80% from 64, where oneDNN's product of the same shapes
// reached 30% and 60%.
//
// Where the CPU has AVX-512 and PyTorch dispatches to it (not under ATEN_CPU_CAPABILITY=avx2,
// as zoo bench --isa avx2 sets), the same panels go through an AVX-512 kernel, a panel's 16
// weights one vector: on a 2-core Xeon (Sapphire Rapids class) its products of 4 to 128 rows
// ran at up to twice the AVX2 kernel's rate, with the same results to the bit.
//
// Weights packed as int8 with per-row scales (int8_linear.cpp), and as 4-bit groups
// (int4_linear.cpp), go through the same operator.
//
// Every output is one chain of FMAs over k in order, then the bias: so a row's result
// does not depend on how many rows come with it or on the number of threads.
// zoo/native.py compiles it on first use; docs/bench.md measures it.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "int4_linear.h"
#include "int8_linear.h"
#include "packed_linear.h"
#include "product_common.h"
#include "weight_memory.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>

namespace {

constexpr int64_t NR = 16;  // output columns per panel: two AVX2 vectors
constexpr int64_t BLOCK = 4;  // panels per task of a thread (64 outputs)

// MR rows of x (from x, row stride ldx) against NP panels (from w, one every K * NR
// floats): y[m][0 .. cols) of each panel, plus the bias. cols < NR only in the last.
template <int MR, int NP>
__attribute__((target("avx2,fma"))) inline void micro(const float* x, int64_t ldx,
                                                      const float* w, int64_t K, float* y,
                                                      int64_t ldy, const float* b,
                                                      int64_t cols_last) {
  __m256 acc[MR][2 * NP];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 2 * NP; ++j) acc[m][j] = _mm256_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m256 wv[2 * NP];
    for (int p = 0; p < NP; ++p) {
      wv[2 * p] = _mm256_loadu_ps(w + p * K * NR + k * NR);
      wv[2 * p + 1] = _mm256_loadu_ps(w + p * K * NR + k * NR + 8);
    }
    for (int m = 0; m < MR; ++m) {
      // set1 of a value, not _mm256_broadcast_ss: GCC then keeps acc in registers
      const __m256 xb = _mm256_set1_ps(x[m * ldx + k]);
      for (int j = 0; j < 2 * NP; ++j) acc[m][j] = _mm256_fmadd_ps(wv[j], xb, acc[m][j]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t cols = p == NP - 1 ? cols_last : NR;
    const float* bp = b ? b + p * NR : nullptr;
    for (int m = 0; m < MR; ++m) {
      float* out = y + m * ldy + p * NR;
      if (cols == NR) {
        const __m256 b0 = bp ? _mm256_loadu_ps(bp) : _mm256_setzero_ps();
        const __m256 b1 = bp ? _mm256_loadu_ps(bp + 8) : _mm256_setzero_ps();
        _mm256_storeu_ps(out, _mm256_add_ps(acc[m][2 * p], b0));
        _mm256_storeu_ps(out + 8, _mm256_add_ps(acc[m][2 * p + 1], b1));
      } else {
        alignas(32) float tmp[NR];
        _mm256_store_ps(tmp, acc[m][2 * p]);
        _mm256_store_ps(tmp + 8, acc[m][2 * p + 1]);
        for (int64_t j = 0; j < cols; ++j) out[j] = tmp[j] + (bp ? bp[j] : 0.f);
      }
    }
  }
}

// The same product with AVX-512: a panel's 16 weights of one k are one vector, so each step
// of k loads NP vectors and adds MR x NP FMAs. Every output is the same chain of FMAs over k
// in order, then the bias, as micro's: the two kernels give the same bits.
template <int MR, int NP>
__attribute__((target("avx512f"))) inline void micro512(const float* x, int64_t ldx,
                                                         const float* w, int64_t K, float* y,
                                                         int64_t ldy, const float* b,
                                                         int64_t cols_last) {
  __m512 acc[MR][NP];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < NP; ++j) acc[m][j] = _mm512_setzero_ps();
  for (int64_t k = 0; k < K; ++k) {
    __m512 wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = _mm512_loadu_ps(w + p * K * NR + k * NR);
    for (int m = 0; m < MR; ++m) {
      const __m512 xb = _mm512_set1_ps(x[m * ldx + k]);
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_fmadd_ps(wv[p], xb, acc[m][p]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t cols = p == NP - 1 ? cols_last : NR;
    const __mmask16 keep = cols == NR ? __mmask16(0xFFFF) : __mmask16((1u << cols) - 1);
    const __m512 bias = b ? _mm512_maskz_loadu_ps(keep, b + p * NR) : _mm512_setzero_ps();
    for (int m = 0; m < MR; ++m)
      _mm512_mask_storeu_ps(y + m * ldy + p * NR, keep, _mm512_add_ps(acc[m][p], bias));
  }
}

struct Product {
  const float *x, *w, *b;
  float* y;
  int64_t K, N;
};

// MR rows from row m, against panels [p0, p1), as many panels at a time as keep eight to
// twelve accumulators: with AVX2 (a panel two vectors) four at one row, two at two or three,
// one from four; with AVX-512 (``wide``: a panel one vector) four at one to three rows, two
// from four. At one row, four panels are four streams from memory.
template <int MR, bool WIDE>
void rows_of(const Product& a, int64_t m, int64_t p0, int64_t p1) {
  constexpr int NP = WIDE ? (MR <= 3 ? 4 : 2) : (MR == 1 ? 4 : MR <= 3 ? 2 : 1);
  const float* x = a.x + m * a.K;
  float* y = a.y + m * a.N;
  zoo::common::over_groups<NP>(p0, p1, a.N, [&](auto np, int64_t p, int64_t cols) {
    constexpr int G = decltype(np)::value;
    const float* w = a.w + p * a.K * NR;
    const float* b = a.b ? a.b + p * NR : nullptr;
    if constexpr (WIDE)
      micro512<MR, G>(x, a.K, w, a.K, y + p * NR, a.N, b, cols);
    else
      micro<MR, G>(x, a.K, w, a.K, y + p * NR, a.N, b, cols);
  });
}

template <bool WIDE>
void block(const Product& a, int64_t m, int64_t mr, int64_t p0, int64_t p1) {
  zoo::common::with_rows(mr, [&](auto rows) {
    rows_of<decltype(rows)::value, WIDE>(a, m, p0, p1);
  });
}

}  // namespace

namespace zoo {

PackedShape packed_shape(const at::Tensor& packed, const char* op) {
  if (packed.scalar_type() == at::kChar) return int8_packed_shape(packed, op);
  if (packed.scalar_type() == at::kByte) return int4_packed_shape(packed, op);
  TORCH_CHECK_VALUE(packed.device().is_cpu() && packed.scalar_type() == at::kFloat &&
                        packed.dim() == 1 && packed.is_contiguous() && packed.numel() >= NR,
                    op, ": packed is not a weight from pack_linear_weight (a contiguous 1-d "
                    "float32 CPU tensor with its header)");
  int64_t head[3];
  std::memcpy(head, packed.const_data_ptr<float>(), sizeof(head));
  const int64_t N = head[1], K = head[2];
  TORCH_CHECK_VALUE(head[0] == kPackMagic && N >= 0 && K >= 0 &&
                        packed.numel() == NR + (N + NR - 1) / NR * K * NR,
                    op, ": packed is not a weight from pack_linear_weight (its header does "
                    "not match its size)");
  return {N, K};
}

at::Tensor pack_linear_weight(const at::Tensor& weight) {
  TORCH_CHECK_VALUE(weight.device().is_cpu() && weight.scalar_type() == at::kFloat &&
                        weight.dim() == 2,
                    "pack_linear_weight: a 2-d float32 CPU weight (out_features, in_features)");
  const at::Tensor w = weight.contiguous();
  const int64_t N = w.size(0), K = w.size(1), panels = (N + NR - 1) / NR;
  // a header of NR floats (what it is, N, K), then the panels: 64 bytes, so they stay aligned
  at::Tensor packed = zoo::common::weight_zeros(NR + panels * K * NR, w.options());
  const int64_t head[3] = {kPackMagic, N, K};
  std::memcpy(packed.data_ptr<float>(), head, sizeof(head));
  const float* src = w.data_ptr<float>();
  float* dst = packed.data_ptr<float>() + NR;
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t j = 0; j < NR && p * NR + j < N; ++j)
        for (int64_t k = 0; k < K; ++k) dst[(p * K + k) * NR + j] = src[(p * NR + j) * K + k];
  });
  return packed;
}

at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& packed,
                         const std::optional<at::Tensor>& bias, int64_t n_out) {
  TORCH_CHECK_VALUE(x.device().is_cpu() && x.scalar_type() == at::kFloat,
                    "packed_linear: x is a float32 CPU tensor");
  const auto [N, K] = packed_shape(packed, "packed_linear");
  TORCH_CHECK_VALUE(n_out == N, "packed_linear: n_out is ", n_out, ", but the packed weight has ",
                    N, " outputs");
  TORCH_CHECK_VALUE(x.dim() >= 1 && x.size(-1) == K, "packed_linear: x's last size ",
                    x.dim() ? x.size(-1) : 0, " is not the weight's ", K);
  const at::Tensor xc = x.contiguous();
  at::Tensor y = common::product_output(x, n_out);
  const float* b = common::bias_data(bias, n_out, "packed_linear");
  if (K == 0) return common::bias_only(y, bias);
  if (packed.scalar_type() == at::kChar) {
    int8_product(xc, packed, b, y, K, n_out);
    return y;
  }
  if (packed.scalar_type() == at::kByte) {
    int4_product(xc, packed, b, y, K, n_out);
    return y;
  }
  const int64_t rows = xc.numel() / K;
  if (rows == 0 || n_out == 0) return y;
  const Product a{xc.data_ptr<float>(), packed.data_ptr<float>() + NR, b, y.data_ptr<float>(),
                  K, n_out};
  if (common::avx512()) {  // two panels at a time through the blocks of rows
    common::over_panels(rows, n_out, BLOCK, [&](int64_t m, int64_t mr, int64_t p0,
                                                int64_t p1) { block<true>(a, m, mr, p0, p1); },
                        2);
    return y;
  }
  common::over_panels(rows, n_out, BLOCK, [&](int64_t m, int64_t mr, int64_t p0, int64_t p1) {
    block<false>(a, m, mr, p0, p1);
  });
  return y;
}

}  // namespace zoo

TORCH_LIBRARY_FRAGMENT(zoo, m) {
  m.def("pack_linear_weight(Tensor weight) -> Tensor");
  m.def("packed_linear(Tensor x, Tensor packed, Tensor? bias, int n_out) -> Tensor");
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) {
  m.impl("pack_linear_weight", zoo::pack_linear_weight);
  m.impl("packed_linear", zoo::packed_linear);
}
