// zoo::packed_linear on 4-bit weights: y = x W^T + b with W stored in groups of 32 input
// columns, each group of each output row as 32 signed 4-bit integers q (-8 to 7) and one
// scale d, W = q d (llama.cpp's q4_0: 4.5 bits a weight with a 16-bit scale; Dettmers and
// Zettlemoyer, "The case for 4-bit precision", 2023; Frantar et al., "GPTQ", 2023, for groups).
// Weight-only: x stays float32 and each group is turned back into floats inside the product,
// so a decoding step, bound by reading its weights, reads a little over half the bytes of
// int8 and 14% of float32's.
//
// Layout: after a 64-byte header (magic, N, K), panels of 16 outputs; a panel is K / 32
// blocks of 288 bytes: the 16 outputs' scales as float16 (32 bytes), then for each of the 32
// columns 8 bytes, byte j holding output j's q + 8 in its low half and output j + 8's in its
// high half. At one row (a decoding step) a block's values go into registers as 16 floats a
// column and are summed unscaled over the group, then scaled once (four streams of panels);
// at more rows (a prompt read) each panel is made floats once and read by every row.
// Every output's group sums run in the order of k, so a row's result depends on that row
// alone (not on the others, nor on the threads).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "int4_linear.h"
#include "product_common.h"
#include "weight_memory.h"

#include <immintrin.h>

#include <algorithm>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t NR = 16;                    // outputs per panel
constexpr int64_t GROUP = 32;                 // input columns per scale
constexpr int64_t HEADER = 64;                // bytes before the first panel
constexpr int64_t BLOCK_BYTES = 32 + GROUP * 8;  // a panel's group: scales, then q
constexpr int64_t PER_TASK = 4;               // panels per task of a thread
constexpr int64_t PREFETCH = 24;               // groups read ahead at one row (6.9 KB a panel)

struct Product {
  const float* x;
  const float* x_sums;  // row r, group g: the sum of x over the group (one row at a time)
  const uint8_t* w;     // the first panel
  const float* b;
  float* y;
  int64_t K, N, groups;
};

// The 16 q of column k of a block, as stored (unsigned, q + 8): outputs 0-7 (lo) and 16
// times outputs 8-15 (hi, left in the high half of each byte: the 16 is taken out with the
// scale). Two ANDs and two conversions, no shifts (one port on some AMD cores).
__attribute__((target("avx2,fma"))) inline void column(const uint8_t* q, __m256& lo,
                                                       __m256& hi) {
  const __m256i v = _mm256_cvtepu8_epi32(_mm_loadl_epi64(reinterpret_cast<const __m128i*>(q)));
  lo = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0x0F)));
  hi = _mm256_cvtepi32_ps(_mm256_and_si256(v, _mm256_set1_epi32(0xF0)));
}

// A block's 16 scales: d for outputs 0-7 and d / 16 for outputs 8-15 (see column).
__attribute__((target("avx2,fma,f16c"))) inline void scales(const uint8_t* block, __m256& lo,
                                                             __m256& hi) {
  lo = _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block)));
  hi = _mm256_mul_ps(
      _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16))),
      _mm256_set1_ps(1.f / 16.f));
}

// y[0 .. cols) = acc + bias for one row of a panel.
__attribute__((target("avx2,fma"))) inline void store(float* out, __m256 lo, __m256 hi,
                                                      const float* b, int64_t cols) {
  if (cols == NR) {
    _mm256_storeu_ps(out, b ? _mm256_add_ps(lo, _mm256_loadu_ps(b)) : lo);
    _mm256_storeu_ps(out + 8, b ? _mm256_add_ps(hi, _mm256_loadu_ps(b + 8)) : hi);
    return;
  }
  alignas(32) float tmp[NR];
  _mm256_store_ps(tmp, lo);
  _mm256_store_ps(tmp + 8, hi);
  for (int64_t j = 0; j < cols; ++j) out[j] = tmp[j] + (b ? b[j] : 0.f);
}

// One row against NP panels from panel p: each group's stored values summed against x
// unscaled, then d (sum - 8 sum(x)) added (q = stored - 8). Four panels are four streams from
// memory, as many as the int8 kernel reads at one row (two left reading at half the rate); the
// running totals wait in memory between groups, so that the group sums keep the registers.
template <int NP>
__attribute__((target("avx2,fma,f16c"))) void one_row(const Product& a, int64_t m, int64_t p,
                                                       int64_t cols_last) {
  const float* x = a.x + m * a.K;
  const float* sums = a.x_sums + m * a.groups;
  const int64_t stride = a.groups * BLOCK_BYTES;
  const uint8_t* w = a.w + p * stride;
  alignas(32) float acc[NP * NR] = {};
  for (int64_t g = 0; g < a.groups; ++g) {
    __m256 sum[2 * NP];
    for (int j = 0; j < 2 * NP; ++j) sum[j] = _mm256_setzero_ps();
    const float* xg = x + g * GROUP;
    for (int i = 0; i < NP; ++i)  // PREFETCH groups ahead: a stream's reads stay in flight
      for (int64_t line = 0; line < BLOCK_BYTES; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(w + i * stride + (g + PREFETCH) * BLOCK_BYTES +
                                                   line),
                     _MM_HINT_T0);
    for (int64_t k = 0; k < GROUP; ++k) {
      const __m256 xb = _mm256_set1_ps(xg[k]);
      for (int i = 0; i < NP; ++i) {
        __m256 lo, hi;
        column(w + i * stride + g * BLOCK_BYTES + 32 + k * 8, lo, hi);
        sum[2 * i] = _mm256_fmadd_ps(lo, xb, sum[2 * i]);
        sum[2 * i + 1] = _mm256_fmadd_ps(hi, xb, sum[2 * i + 1]);
      }
    }
    const __m256 off_lo = _mm256_set1_ps(8.f * sums[g]), off_hi = _mm256_set1_ps(128.f * sums[g]);
    for (int i = 0; i < NP; ++i) {
      __m256 d_lo, d_hi;
      scales(w + i * stride + g * BLOCK_BYTES, d_lo, d_hi);
      float* t = acc + i * NR;
      _mm256_store_ps(t, _mm256_fmadd_ps(_mm256_sub_ps(sum[2 * i], off_lo), d_lo,
                                         _mm256_load_ps(t)));
      _mm256_store_ps(t + 8, _mm256_fmadd_ps(_mm256_sub_ps(sum[2 * i + 1], off_hi), d_hi,
                                             _mm256_load_ps(t + 8)));
    }
  }
  for (int i = 0; i < NP; ++i)
    store(a.y + m * a.N + (p + i) * NR, _mm256_load_ps(acc + i * NR),
          _mm256_load_ps(acc + i * NR + 8), a.b ? a.b + (p + i) * NR : nullptr,
          i == NP - 1 ? cols_last : NR);
}

// Panel p made floats (K x 16, each column's 16 weights side by side) into ``out``.
__attribute__((target("avx2,fma,f16c"))) void panel_floats(const Product& a, int64_t p,
                                                            float* out) {
  const uint8_t* w = a.w + p * a.groups * BLOCK_BYTES;
  for (int64_t g = 0; g < a.groups; ++g) {
    const uint8_t* block = w + g * BLOCK_BYTES;
    __m256 d_lo, d_hi;
    scales(block, d_lo, d_hi);
    const __m256 off_lo = _mm256_set1_ps(8.f), off_hi = _mm256_set1_ps(128.f);
    for (int64_t k = 0; k < GROUP; ++k) {
      __m256 lo, hi;
      column(block + 32 + k * 8, lo, hi);
      float* o = out + (g * GROUP + k) * NR;
      _mm256_storeu_ps(o, _mm256_mul_ps(_mm256_sub_ps(lo, off_lo), d_lo));
      _mm256_storeu_ps(o + 8, _mm256_mul_ps(_mm256_sub_ps(hi, off_hi), d_hi));
    }
  }
}

// MR rows (1 to 6) from row m against a panel made floats (panel_floats).
template <int MR>
__attribute__((target("avx2,fma"))) void rows(const Product& a, const float* panel, int64_t m,
                                               int64_t p, int64_t cols) {
  __m256 acc[MR][2];
  for (int r = 0; r < MR; ++r) acc[r][0] = acc[r][1] = _mm256_setzero_ps();
  for (int64_t k = 0; k < a.K; ++k) {
    const __m256 lo = _mm256_loadu_ps(panel + k * NR), hi = _mm256_loadu_ps(panel + k * NR + 8);
    for (int r = 0; r < MR; ++r) {
      const __m256 xb = _mm256_set1_ps(a.x[(m + r) * a.K + k]);
      acc[r][0] = _mm256_fmadd_ps(lo, xb, acc[r][0]);
      acc[r][1] = _mm256_fmadd_ps(hi, xb, acc[r][1]);
    }
  }
  for (int r = 0; r < MR; ++r)
    store(a.y + (m + r) * a.N + p * NR, acc[r][0], acc[r][1], a.b ? a.b + p * NR : nullptr,
          cols);
}

// Every row against panels [p0, p1): each panel made floats once, then read by the rows six
// at a time.
void many_rows(const Product& a, int64_t total_rows, int64_t p0, int64_t p1) {
  std::vector<float> panel(a.K * NR);  // (its task's own)
  const int64_t panels = (a.N + NR - 1) / NR;
  for (int64_t p = p0; p < p1; ++p) {
    panel_floats(a, p, panel.data());
    const int64_t cols = p == panels - 1 ? a.N - p * NR : NR;
    for (int64_t m = 0; m < total_rows; m += 6)
      zoo::common::with_rows(std::min<int64_t>(6, total_rows - m), [&](auto rows_c) {
        rows<decltype(rows_c)::value>(a, panel.data(), m, p, cols);
      });
  }
}

}  // namespace

namespace zoo {

PackedShape int4_packed_shape(const at::Tensor& packed, const char* op) {
  TORCH_CHECK_VALUE(packed.device().is_cpu() && packed.scalar_type() == at::kByte &&
                        packed.dim() == 1 && packed.is_contiguous() && packed.numel() >= HEADER,
                    op, ": packed is not a weight from pack_int4_weight (a contiguous 1-d "
                    "uint8 CPU tensor with its header)");
  int64_t head[3];
  std::memcpy(head, packed.const_data_ptr<uint8_t>(), sizeof(head));
  const int64_t N = head[1], K = head[2];
  TORCH_CHECK_VALUE(head[0] == kInt4PackMagic && N >= 0 && K >= 0 && K % GROUP == 0 &&
                        packed.numel() == HEADER + (N + NR - 1) / NR * (K / GROUP) * BLOCK_BYTES,
                    op, ": packed is not a weight from pack_int4_weight (its header does not "
                    "match its size)");
  return {N, K};
}

at::Tensor pack_int4_weight(const at::Tensor& q, const at::Tensor& scale) {
  TORCH_CHECK_VALUE(q.device().is_cpu() && q.scalar_type() == at::kByte && q.dim() == 2,
                    "pack_int4_weight: q is a 2-d uint8 CPU tensor (out_features, "
                    "in_features / 2), two 4-bit values a byte, the even column low");
  const int64_t N = q.size(0), K = q.size(1) * 2;
  TORCH_CHECK_VALUE(K % GROUP == 0, "pack_int4_weight: in_features (", K,
                    ") is a multiple of ", GROUP);
  TORCH_CHECK_VALUE(scale.device().is_cpu() && scale.scalar_type() == at::kHalf &&
                        scale.dim() == 2 && scale.size(0) == N && scale.size(1) == K / GROUP,
                    "pack_int4_weight: scale is a float16 CPU tensor (out_features, "
                    "in_features / 32)");
  const at::Tensor qc = q.contiguous(), sc = scale.contiguous();
  const int64_t panels = (N + NR - 1) / NR, groups = K / GROUP;
  at::Tensor packed = common::weight_zeros(HEADER + panels * groups * BLOCK_BYTES,
                                           q.options());
  uint8_t* dst = packed.data_ptr<uint8_t>();
  const int64_t head[3] = {kInt4PackMagic, N, K};
  std::memcpy(dst, head, sizeof(head));
  const uint8_t* src = qc.data_ptr<uint8_t>();
  const uint16_t* scales = reinterpret_cast<const uint16_t*>(sc.data_ptr<at::Half>());
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p)
      for (int64_t g = 0; g < groups; ++g) {
        uint8_t* block = dst + HEADER + (p * groups + g) * BLOCK_BYTES;
        uint16_t* s = reinterpret_cast<uint16_t*>(block);
        for (int64_t j = 0; j < NR && p * NR + j < N; ++j) {
          const int64_t n = p * NR + j;
          s[j] = scales[n * groups + g];
          for (int64_t k = 0; k < GROUP; ++k) {
            const int64_t col = g * GROUP + k;
            // stored unsigned: q + 8 (0 to 15)
            const uint8_t v = ((src[n * (K / 2) + col / 2] >> (4 * (col % 2))) + 8) & 0xF;
            block[32 + k * 8 + j % 8] |= uint8_t(v << (4 * (j / 8)));
          }
        }
      }
  });
  return packed;
}

void int4_product(const at::Tensor& x, const at::Tensor& packed, const float* bias, at::Tensor& y,
                  int64_t K, int64_t n_out) {
  const int64_t rows_total = x.numel() / K;
  if (rows_total == 0 || n_out == 0) return;
  const int64_t groups = K / GROUP, panels = (n_out + NR - 1) / NR;
  Product a{x.data_ptr<float>(), nullptr, packed.data_ptr<uint8_t>() + HEADER, bias,
            y.data_ptr<float>(), K, n_out, groups};
  if (rows_total == 1) {
    std::vector<float> sums(groups);
    for (int64_t g = 0; g < groups; ++g) {
      float s = 0.f;
      for (int64_t k = 0; k < GROUP; ++k) s += a.x[g * GROUP + k];
      sums[g] = s;
    }
    a.x_sums = sums.data();
    common::over_panels(1, n_out, PER_TASK, [&](int64_t m, int64_t, int64_t p0, int64_t p1) {
      common::over_groups<2>(p0, p1, n_out, [&](auto np, int64_t p, int64_t cols) {
        one_row<decltype(np)::value>(a, m, p, cols);
      });
    });
    return;
  }
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    many_rows(a, rows_total, p0, p1);
  });
}

}  // namespace zoo

TORCH_LIBRARY_FRAGMENT(zoo, m) {
  m.def("pack_int4_weight(Tensor q, Tensor scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) {
  m.impl("pack_int4_weight", zoo::pack_int4_weight);
}
