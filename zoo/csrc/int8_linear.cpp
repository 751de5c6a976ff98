// zoo::packed_linear on int8 weights: y = (x Q^T) * s + b for one to a few dozen rows of x,
// where Q is the weight rounded to int8 with one scale s per output row (zoo.quantization).
// Decoding one sentence is bound by reading the weights; stored as int8 they are a quarter of
// fp32's bytes. As FBGEMM's and CTranslate2's int8 products do, each row of x is rounded to
// int8 too (dynamic quantization: symmetric, one scale a row, from its largest value) and the
// products are integer dot products summed in int32: VNNI's vpdpbusd (four u8 x s8 products
// and their sum in one instruction) where the CPU has it (on 512-bit vectors where it has
// AVX-512 VNNI and PyTorch dispatches AVX-512: int8_kernel512.h, with the same bits; on AMX's
// tiles from 8 rows where it has AMX-INT8: int8_amx.h, the same bits again), else
// AVX2's vpmaddubsw and vpmaddwd, whose int16 pair sums saturate unless x keeps 7 bits
// (FBGEMM's reduce_range).
// x goes in as unsigned bytes, x + z (z = 128, or 64 with 7 bits); the packed weight keeps
// each output's sum of weights so that z times it is taken off again.
//
// Layout: panels of 16 outputs; in a panel, input columns in groups of four, each group 64
// bytes (the four int8 weights of each output side by side: the operand order of vpdpbusd),
// then the panel's 16 scales and 16 weight sums. K is padded to a multiple of four with zero
// weights. A row's result depends on that row alone (not on the others, nor the threads).
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <ATen/ops/empty.h>
#include <ATen/ops/zeros.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include "int8_linear.h"
#include "product_common.h"
#include "weight_memory.h"

#include <cpuid.h>
#include <immintrin.h>
#include <sys/syscall.h>
#include <unistd.h>

#include <algorithm>
#include <cctype>
#include <cstdint>
#include <cmath>
#include <cstdlib>
#include <cstring>
#include <string>
#include <vector>

namespace {

constexpr int64_t NR = 16;       // outputs per panel
constexpr int64_t HEADER = 64;   // bytes before the first panel: magic, N, K
constexpr int64_t BLOCK = 4;     // panels per task of a thread

int64_t padded(int64_t K) { return (K + 3) / 4 * 4; }
int64_t panel_bytes(int64_t K) { return padded(K) * NR + 2 * NR * 4; }

struct Product {
  const uint8_t* x;      // rows x padded(K) bytes: round(x / scale) + z
  const float* xscale;   // a row's scale
  const int8_t* w;       // the first panel
  const float* b;
  float* y;
  int64_t K, N, z;
};

namespace avx2 {
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma")
#endif
// int16 sums of pairs (exact with 7-bit x), then int32 sums of those pairs
inline __m256i dot(__m256i acc, __m256i x, __m256i w) {
  const __m256i pairs = _mm256_maddubs_epi16(x, w);
  return _mm256_add_epi32(acc, _mm256_madd_epi16(pairs, _mm256_set1_epi16(1)));
}
#include "int8_kernel.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
}  // namespace avx2

namespace vnni512 {
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512vl,avx512vnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512vl,avx512vnni")
#endif
inline __m256i dot(__m256i acc, __m256i x, __m256i w) { return _mm256_dpbusd_epi32(acc, x, w); }
#include "int8_kernel.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
}  // namespace vnni512

namespace zmm {  // AVX-512 VNNI on 512-bit vectors, and AMX's tiles
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avx512f,avx512bw,avx512vnni,amx-tile,amx-int8"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avx512f,avx512bw,avx512vnni,amx-tile,amx-int8")
#endif
#include "int8_kernel512.h"
#include "int8_amx.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
}  // namespace zmm

namespace avxvnni {
#if defined(__clang__)
#pragma clang attribute push(__attribute__((target("avx2,fma,avxvnni"))), apply_to = function)
#else
#pragma GCC push_options
#pragma GCC target("avx2,fma,avxvnni")
#endif
inline __m256i dot(__m256i acc, __m256i x, __m256i w) {
  return _mm256_dpbusd_avx_epi32(acc, x, w);
}
#include "int8_kernel.h"
#if defined(__clang__)
#pragma clang attribute pop
#else
#pragma GCC pop_options
#endif
}  // namespace avxvnni

// Eight floats times inv, rounded to int32 (half to even), plus z.
__attribute__((target("avx2,fma"))) inline __m256i levels_of(const float* x, __m256 inv,
                                                            __m256i z) {
  return _mm256_add_epi32(_mm256_cvtps_epi32(_mm256_mul_ps(_mm256_loadu_ps(x), inv)), z);
}

// A row of K floats to bytes: its scale max|x| / levels, and round(x * levels / max|x|) + z
// (round half to even, as std::nearbyint in the default rounding mode), eight floats at a
// time; a NaN is skipped by the max, as std::max skips it.
__attribute__((target("avx2,fma"))) float quantize_row(const float* row, int64_t K,
                                                      float levels, int32_t z, uint8_t* q) {
  const __m256 sign = _mm256_set1_ps(-0.f);
  __m256 big = _mm256_setzero_ps();
  int64_t k = 0;
  for (; k + 8 <= K; k += 8)
    big = _mm256_max_ps(_mm256_andnot_ps(sign, _mm256_loadu_ps(row + k)), big);
  alignas(32) float lanes[8];
  _mm256_store_ps(lanes, big);
  float amax = 0.f;
  for (float lane : lanes) amax = std::max(amax, lane);
  for (; k < K; ++k) amax = std::max(amax, std::fabs(row[k]));
  const float inv = amax > 0.f ? levels / amax : 0.f;
  const __m256 vinv = _mm256_set1_ps(inv);
  const __m256i vz = _mm256_set1_epi32(z);
  const __m256i order = _mm256_setr_epi32(0, 4, 1, 5, 2, 6, 3, 7);
  for (k = 0; k + 32 <= K; k += 32) {
    const __m256i ab = _mm256_packs_epi32(levels_of(row + k, vinv, vz),
                                          levels_of(row + k + 8, vinv, vz));
    const __m256i cd = _mm256_packs_epi32(levels_of(row + k + 16, vinv, vz),
                                          levels_of(row + k + 24, vinv, vz));
    const __m256i all = _mm256_permutevar8x32_epi32(_mm256_packus_epi16(ab, cd), order);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(q + k), all);
  }
  for (; k < K; ++k) q[k] = uint8_t(int32_t(std::nearbyint(row[k] * inv)) + z);
  return amax / levels;
}

enum class Isa { kAvx2, kAvx512Vnni, kAvxVnni };

// VNNI where the CPU has it, unless PyTorch is told to dispatch no further than AVX2
// (ATEN_CPU_CAPABILITY=avx2, as zoo bench --isa avx2 does): then AVX2's products, as on a CPU
// without VNNI.
Isa isa() {
  static const Isa found = [] {
    const char* cap = std::getenv("ATEN_CPU_CAPABILITY");
    if (cap && (std::strcmp(cap, "avx2") == 0 || std::strcmp(cap, "AVX2") == 0))
      return Isa::kAvx2;
    if (__builtin_cpu_supports("avx512vnni") && __builtin_cpu_supports("avx512vl"))
      return Isa::kAvx512Vnni;
    return __builtin_cpu_supports("avxvnni") ? Isa::kAvxVnni : Isa::kAvx2;
  }();
  return found;
}

// AMX's tiles where the CPU has AMX-INT8, Linux lets this process use them (a process asks
// once: arch_prctl ARCH_REQ_XCOMP_PERM for XTILEDATA), and oneDNN is not told to leave them
// alone (ONEDNN_MAX_CPU_ISA below AMX, as zoo bench --isa no-amx sets it).
bool amx_ready() {
  static const bool ready = [] {
    if (const char* cap = std::getenv("ONEDNN_MAX_CPU_ISA")) {
      std::string upper(cap);
      for (char& c : upper) c = char(std::toupper(static_cast<unsigned char>(c)));
      if (upper.find("AMX") == std::string::npos && upper != "ALL" && upper != "DEFAULT")
        return false;
    }
    unsigned a = 0, b = 0, c = 0, d = 0;
    if (!__get_cpuid_count(7, 0, &a, &b, &c, &d) || !(d & (1u << 24)) || !(d & (1u << 25)))
      return false;  // AMX-TILE and AMX-INT8
    constexpr long kReqXcompPerm = 0x1023, kXtiledata = 18;
    return syscall(SYS_arch_prctl, kReqXcompPerm, kXtiledata) == 0;
  }();
  return ready;
}

// AMX's tiles from this many rows: below, a tile of x is mostly empty and the vectors keep up
constexpr int64_t AMX_ROWS = 8;

}  // namespace

namespace zoo {

bool int8_on_amx() { return isa() == Isa::kAvx512Vnni && zoo::common::avx512() && amx_ready(); }

std::string int8_isa() {
  switch (isa()) {
    case Isa::kAvx512Vnni:
      if (!zoo::common::avx512()) return "AVX-512 VNNI on 256-bit vectors";
      return amx_ready() ? "AMX tiles from " + std::to_string(AMX_ROWS) +
                               " rows (inputs a multiple of 64), AVX-512 VNNI below"
                         : "AVX-512 VNNI";
    case Isa::kAvxVnni: return "AVX-VNNI";
    default: return "AVX2 (7-bit activations)";
  }
}

PackedShape int8_packed_shape(const at::Tensor& packed, const char* op) {
  TORCH_CHECK_VALUE(packed.device().is_cpu() && packed.scalar_type() == at::kChar &&
                        packed.dim() == 1 && packed.is_contiguous() && packed.numel() >= HEADER,
                    op, ": packed is not a weight from pack_int8_weight (a contiguous 1-d "
                    "int8 CPU tensor with its header)");
  int64_t head[3];
  std::memcpy(head, packed.const_data_ptr<int8_t>(), sizeof(head));
  const int64_t N = head[1], K = head[2];
  TORCH_CHECK_VALUE(head[0] == kInt8PackMagic && N >= 0 && K >= 0 &&
                        packed.numel() == HEADER + (N + NR - 1) / NR * panel_bytes(K),
                    op, ": packed is not a weight from pack_int8_weight (its header does "
                    "not match its size)");
  return {N, K};
}

at::Tensor pack_int8_weight(const at::Tensor& weight, const at::Tensor& scale) {
  TORCH_CHECK_VALUE(weight.device().is_cpu() && weight.scalar_type() == at::kChar &&
                        weight.dim() == 2,
                    "pack_int8_weight: a 2-d int8 CPU weight (out_features, in_features)");
  const int64_t N = weight.size(0), K = weight.size(1), panels = (N + NR - 1) / NR;
  TORCH_CHECK_VALUE(scale.device().is_cpu() && scale.scalar_type() == at::kFloat &&
                        scale.dim() == 1 && scale.numel() == N,
                    "pack_int8_weight: scale is a float32 CPU vector of ", N,
                    " values (one an output row)");
  const at::Tensor w = weight.contiguous(), s = scale.contiguous();
  at::Tensor packed = zoo::common::weight_zeros(HEADER + panels * panel_bytes(K), w.options());
  const int64_t head[3] = {kInt8PackMagic, N, K};
  int8_t* base = packed.data_ptr<int8_t>();
  std::memcpy(base, head, sizeof(head));
  const int8_t* src = w.data_ptr<int8_t>();
  const float* sp = s.data_ptr<float>();
  const int64_t K4 = padded(K);
  at::parallel_for(0, panels, 1, [&](int64_t p0, int64_t p1) {
    for (int64_t p = p0; p < p1; ++p) {
      int8_t* dst = base + HEADER + p * panel_bytes(K);
      float scales[NR] = {};
      int32_t sums[NR] = {};
      for (int64_t j = 0; j < NR && p * NR + j < N; ++j) {
        const int8_t* row = src + (p * NR + j) * K;
        for (int64_t k = 0; k < K; ++k) {
          dst[(k / 4) * 4 * NR + j * 4 + k % 4] = row[k];  // four k of output j side by side
          sums[j] += row[k];
        }
        scales[j] = sp[p * NR + j];
      }
      std::memcpy(dst + K4 * NR, scales, sizeof(scales));
      std::memcpy(dst + K4 * NR + sizeof(scales), sums, sizeof(sums));
    }
  });
  return packed;
}

bool int8_full_range() { return isa() != Isa::kAvx2; }

void int8_product(const at::Tensor& x, const at::Tensor& packed, const float* bias,
                  at::Tensor& y, int64_t K, int64_t n_out) {
  const int64_t rows = x.numel() / K;
  if (rows == 0 || n_out == 0) return;
  // each row of x to bytes: round(x * levels / max|x|) + z, z = levels + 1 (or 128 for 8 bits)
  const bool full = int8_full_range();
  const float levels = full ? 127.f : 63.f;
  const int64_t z = full ? 128 : 64, K4 = padded(K);
  std::vector<uint8_t> xq(rows * K4, uint8_t(z));
  std::vector<float> xscale(rows);
  const float* xp = x.data_ptr<float>();
  at::parallel_for(0, rows, 8, [&](int64_t r0, int64_t r1) {
    for (int64_t r = r0; r < r1; ++r)
      xscale[r] = quantize_row(xp + r * K, K, levels, int32_t(z), xq.data() + r * K4);
  });
  const Product a{xq.data(), xscale.data(), packed.data_ptr<int8_t>() + HEADER, bias,
                  y.data_ptr<float>(), K, n_out, z};
  switch (isa()) {
    case Isa::kAvx512Vnni:  // 512 bits wide where PyTorch dispatches AVX-512 too
      if (!zoo::common::avx512()) return vnni512::run(a, rows);
      if (rows >= AMX_ROWS && K4 % 64 == 0 && amx_ready()) return zmm::amx_run(a, rows);
      return zmm::run(a, rows);
    case Isa::kAvxVnni: return avxvnni::run(a, rows);
    default: return avx2::run(a, rows);
  }
}

}  // namespace zoo

TORCH_LIBRARY_FRAGMENT(zoo, m) {
  m.def("pack_int8_weight(Tensor weight, Tensor scale) -> Tensor");
  m.def("int8_full_range() -> bool", [] { return zoo::int8_full_range(); });
  // what zoo's int8 products run on here
  m.def("int8_isa() -> str", [] { return zoo::int8_isa(); });
  m.def("int8_on_amx() -> bool", [] { return zoo::int8_on_amx(); });
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) { m.impl("pack_int8_weight", zoo::pack_int8_weight); }
