// zoo::packed_linear on 4-bit weights: y = x W^T + b with W stored in groups of 32 input
// columns, each group of each output row as 32 signed 4-bit integers q (-8 to 7) and one
// scale d, W = q d (llama.cpp's q4_0: 4.5 bits a weight with a 16-bit scale; Dettmers and
// Zettlemoyer, "The case for 4-bit precision", 2023; Frantar et al., "GPTQ", 2023, for groups).
// As llama.cpp multiplies q4_0 on a CPU, each group of 32 values of a row of x is rounded to
// int8 by a scale of its own (its q8_0: e = max|x| / 127) and the products are integer dot
// products, exact in int32, scaled once a group by d e: so a decoding step, bound by reading
// its weights, reads a little over half the bytes of int8 and 14% of float32's, and turns no
// weight into a float (AVX2's vpmaddubsw takes 32 of them a time, stored as q + 8).
//
// Layout: after a 64-byte header (magic, N, K), panels of 16 outputs, in fours (a quad, the
// last one maybe shorter); a panel's group of 32 columns is a block of 288 bytes: the 16
// outputs' scales as float16 (32 bytes), then for each four columns 32 bytes, byte 4 j + t
// holding output j's q + 8 of column t in its low half and output j + 8's in its high half
// (the operand order of vpmaddubsw and vpmaddwd). A quad holds its panels' blocks group by
// group, side by side (block_at), so that one row, which reads a quad's four panels
// together, reads each thread's share of the weight as one stream from memory.
// Rows go through the panels one to four at a time (schedule in product_common.h); every
// output's group sums are added in the order of k, so a row's result depends on that row
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
#include <cmath>
#include <cstdint>
#include <cstring>
#include <vector>

namespace {

constexpr int64_t NR = 16;                    // outputs per panel
constexpr int64_t GROUP = 32;                 // input columns per scale
constexpr int64_t HEADER = 64;                // bytes before the first panel
constexpr int64_t BLOCK_BYTES = 32 + GROUP * 8;  // a panel's group: scales, then q
constexpr int64_t PER_TASK = 4;               // panels per task of a thread
constexpr int64_t QUAD = 4;                   // panels side by side, group by group
constexpr int64_t PREFETCH = 24 * QUAD * BLOCK_BYTES;  // bytes read ahead at one row

// Where panel p's block of group g starts (see the layout above).
inline int64_t block_at(int64_t p, int64_t g, int64_t groups, int64_t panels) {
  const int64_t q0 = p / QUAD * QUAD, in_quad = std::min<int64_t>(QUAD, panels - q0);
  return (q0 * groups + g * in_quad + (p - q0)) * BLOCK_BYTES;
}

struct Product {
  const int8_t* xq;     // rows x K: x rounded to int8, a scale a group (quantize_row)
  const float* xd;      // rows x groups: those scales
  const int32_t* xsum;  // rows x groups: the sum of each group's int8 values
  const uint8_t* w;     // the first panel
  const float* b;
  float* y;
  int64_t K, N, groups, panels;
};

// A row of x in groups of 32, llama.cpp's quantize_row_q8_0: e = max|x| / 127 and
// q = round(x / e) (half to even, as its AVX2 code rounds), with each group's sum of q.
__attribute__((target("avx2,fma"))) void quantize_row(const float* x, int64_t groups, int8_t* q,
                                                      float* e, int32_t* sum) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  for (int64_t g = 0; g < groups; ++g) {
    const float* xg = x + g * GROUP;
    __m256 v[4], amax = _mm256_setzero_ps();
    for (int i = 0; i < 4; ++i) {
      v[i] = _mm256_loadu_ps(xg + 8 * i);
      amax = _mm256_max_ps(amax, _mm256_andnot_ps(sign, v[i]));
    }
    __m128 m = _mm_max_ps(_mm256_castps256_ps128(amax), _mm256_extractf128_ps(amax, 1));
    m = _mm_max_ps(m, _mm_movehl_ps(m, m));
    m = _mm_max_ss(m, _mm_movehdup_ps(m));
    const float largest = _mm_cvtss_f32(m);
    e[g] = largest / 127.f;
    const __m256 inv = _mm256_set1_ps(largest > 0.f ? 127.f / largest : 0.f);
    __m256i i32[4];
    for (int i = 0; i < 4; ++i) i32[i] = _mm256_cvtps_epi32(_mm256_mul_ps(v[i], inv));
    const __m256i total = _mm256_add_epi32(_mm256_add_epi32(i32[0], i32[1]),
                                           _mm256_add_epi32(i32[2], i32[3]));
    __m128i t = _mm_add_epi32(_mm256_castsi256_si128(total), _mm256_extracti128_si256(total, 1));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0x4E));
    t = _mm_add_epi32(t, _mm_shuffle_epi32(t, 0xB1));
    sum[g] = _mm_cvtsi128_si32(t);
    // int32 to int8 packs within 128-bit lanes; the permutation puts k back in order
    const __m256i i16a = _mm256_packs_epi32(i32[0], i32[1]);
    const __m256i i16b = _mm256_packs_epi32(i32[2], i32[3]);
    const __m256i i8 = _mm256_permutevar8x32_epi32(_mm256_packs_epi16(i16a, i16b),
                                                   _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7));
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + g * GROUP), i8);
  }
}

// MR rows from row m against NP panels from panel p. In a group each panel's 16 outputs
// gather int16 sums of vpmaddubsw's pairs (stored q + 8 in 0 to 15 times x's int8: eight
// pairs of at most 2 * 15 * 127 make at most 30,480, no overflow), made int32 once, less
// 8 times the group's sum of x (q = stored - 8), then scaled by d e into running totals that
// wait in memory between groups. At one row, a quad's blocks of a group are read together,
// PREFETCH bytes ahead of the stream.
template <int MR, int NP>
__attribute__((target("avx2,fma,f16c"))) void tile(const Product& a, int64_t m, int64_t p,
                                                    int64_t cols_last) {
  alignas(32) float acc[MR][NP][NR] = {};
  const __m256i low4 = _mm256_set1_epi8(0x0F), ones = _mm256_set1_epi16(1);
  for (int64_t g = 0; g < a.groups; ++g) {
    const uint8_t* blocks[NP];
    for (int i = 0; i < NP; ++i) blocks[i] = a.w + block_at(p + i, g, a.groups, a.panels);
    if (MR == 1)
      for (int64_t line = 0; line < NP * BLOCK_BYTES; line += 64)
        _mm_prefetch(reinterpret_cast<const char*>(blocks[0] + PREFETCH + line), _MM_HINT_T0);
    __m256i s[MR][NP][2];
    for (int r = 0; r < MR; ++r)
      for (int i = 0; i < NP; ++i) s[r][i][0] = s[r][i][1] = _mm256_setzero_si256();
    for (int64_t c = 0; c < GROUP / 4; ++c)
      for (int i = 0; i < NP; ++i) {
        const __m256i v =
            _mm256_loadu_si256(reinterpret_cast<const __m256i*>(blocks[i] + 32 + c * 32));
        const __m256i lo = _mm256_and_si256(v, low4);
        const __m256i hi = _mm256_and_si256(_mm256_srli_epi16(v, 4), low4);
        for (int r = 0; r < MR; ++r) {
          int32_t four;
          std::memcpy(&four, a.xq + (m + r) * a.K + g * GROUP + c * 4, 4);
          const __m256i xb = _mm256_set1_epi32(four);
          s[r][i][0] = _mm256_add_epi16(s[r][i][0], _mm256_maddubs_epi16(lo, xb));
          s[r][i][1] = _mm256_add_epi16(s[r][i][1], _mm256_maddubs_epi16(hi, xb));
        }
      }
    for (int i = 0; i < NP; ++i) {
      const uint8_t* block = blocks[i];
      const __m256 d[2] = {
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block))),
          _mm256_cvtph_ps(_mm_loadu_si128(reinterpret_cast<const __m128i*>(block + 16)))};
      for (int r = 0; r < MR; ++r) {
        const __m256i off = _mm256_set1_epi32(8 * a.xsum[(m + r) * a.groups + g]);
        const __m256 e = _mm256_set1_ps(a.xd[(m + r) * a.groups + g]);
        for (int h = 0; h < 2; ++h) {
          const __m256 v = _mm256_cvtepi32_ps(
              _mm256_sub_epi32(_mm256_madd_epi16(s[r][i][h], ones), off));
          float* t = acc[r][i] + 8 * h;
          _mm256_store_ps(t, _mm256_fmadd_ps(v, _mm256_mul_ps(d[h], e), _mm256_load_ps(t)));
        }
      }
    }
  }
  for (int r = 0; r < MR; ++r)
    for (int i = 0; i < NP; ++i) {
      const int64_t cols = i == NP - 1 ? cols_last : NR;
      const float* bp = a.b ? a.b + (p + i) * NR : nullptr;
      float* out = a.y + (m + r) * a.N + (p + i) * NR;
      for (int64_t j = 0; j < cols; ++j) out[j] = acc[r][i][j] + (bp ? bp[j] : 0.f);
    }
}

// Four panels at a time at one row, two at two rows, one from three; blocks of at most
// MAX_ROWS rows: each row and panel holds two int16 accumulators, and with the weights'
// two halves, their load and x's broadcast, more than eight spill out of AVX2's 16 registers.
struct Panels {
  static constexpr int of(int rows) { return rows == 1 ? 4 : rows == 2 ? 2 : 1; }
};
constexpr int MAX_ROWS = 4;

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
        uint8_t* block = dst + HEADER + block_at(p, g, groups, panels);
        uint16_t* s = reinterpret_cast<uint16_t*>(block);
        for (int64_t j = 0; j < NR && p * NR + j < N; ++j) {
          const int64_t n = p * NR + j;
          s[j] = scales[n * groups + g];
          for (int64_t k = 0; k < GROUP; ++k) {
            const int64_t col = g * GROUP + k;
            // stored unsigned: q + 8 (0 to 15)
            const uint8_t v = ((src[n * (K / 2) + col / 2] >> (4 * (col % 2))) + 8) & 0xF;
            block[32 + (k / 4) * 32 + (j % 8) * 4 + k % 4] |= uint8_t(v << (4 * (j / 8)));
          }
        }
      }
  });
  return packed;
}

void int4_product(const at::Tensor& x, const at::Tensor& packed, const float* bias, at::Tensor& y,
                  int64_t K, int64_t n_out) {
  const int64_t rows = x.numel() / K;
  if (rows == 0 || n_out == 0) return;
  const int64_t groups = K / GROUP;
  std::vector<int8_t> xq(rows * K);
  std::vector<float> xd(rows * groups);
  std::vector<int32_t> xsum(rows * groups);
  const float* xf = x.data_ptr<float>();
  at::parallel_for(0, rows, std::max<int64_t>(1, 4096 / K), [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      quantize_row(xf + r * K, groups, xq.data() + r * K, xd.data() + r * groups,
                   xsum.data() + r * groups);
  });
  const Product a{xq.data(), xd.data(), xsum.data(), packed.data_ptr<uint8_t>() + HEADER,
                  bias, y.data_ptr<float>(), K, n_out, groups, (n_out + NR - 1) / NR};
  common::schedule<Panels, MAX_ROWS>(rows, n_out, PER_TASK, 1,
                                     [&](auto mr, auto np, int64_t m, int64_t p, int64_t cols) {
                                       tile<decltype(mr)::value, decltype(np)::value>(a, m, p,
                                                                                     cols);
                                     });
}

}  // namespace zoo

TORCH_LIBRARY_FRAGMENT(zoo, m) {
  m.def("pack_int4_weight(Tensor q, Tensor scale) -> Tensor");
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) {
  m.impl("pack_int4_weight", zoo::pack_int4_weight);
}
