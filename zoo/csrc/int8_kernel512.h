// The int8 product's kernel on 512-bit vectors (int8_linear.cpp), for CPUs with AVX-512 VNNI
// where PyTorch dispatches AVX-512: a panel's group of four inputs (64 bytes: four int8
// weights of each of its 16 outputs) is one vector, and vpdpbusd adds four u8 x s8 products
// into each output's int32 lane. The int32 sums are int8_kernel.h's exactly, and the scaling
// after them the same operations in the same order, so the two kernels give the same bits.
// Included once, inside a namespace compiled for AVX-512 VNNI.

// The scaling of one panel's int32 sums into y: (sum - z * the weights' sum) * x's scale *
// the weight's scale + bias, 16 outputs of one row at a time (cols < NR in a product's last).
struct Panel {
  const Product& a;
  int64_t p, cols;
  __m512 scale, bias;
  __m512i zs;
  const float* bp;

  Panel(const Product& product, int64_t panel, int64_t n) : a(product), p(panel), cols(n) {
    const int8_t* tail = a.w + p * panel_bytes(a.K) + padded(a.K) * NR;
    scale = _mm512_loadu_ps(reinterpret_cast<const float*>(tail));
    zs = _mm512_mullo_epi32(_mm512_set1_epi32(int32_t(a.z)), _mm512_loadu_si512(tail + NR * 4));
    bp = a.b ? a.b + p * NR : nullptr;
    bias = bp && cols == NR ? _mm512_loadu_ps(bp) : _mm512_setzero_ps();
  }

  void finish(__m512i sums, int64_t row) const {
    const __m512 v = _mm512_cvtepi32_ps(_mm512_sub_epi32(sums, zs));
    const __m512 r = _mm512_fmadd_ps(v, _mm512_mul_ps(_mm512_set1_ps(a.xscale[row]), scale),
                                     bias);
    float* out = a.y + row * a.N + p * NR;
    if (cols == NR) {
      _mm512_storeu_ps(out, r);
    } else {  // the bias added after, as int8_kernel.h does in a short panel
      alignas(64) float tmp[NR];
      _mm512_store_ps(tmp, r);
      for (int64_t j = 0; j < cols; ++j) out[j] = tmp[j] + (bp ? bp[j] : 0.f);
    }
  }
};

// MR rows of x against NP panels: y[m][0 .. cols) of each, cols < NR only in the last.
template <int MR, int NP>
inline void micro(const Product& a, int64_t m0, int64_t p0, int64_t cols_last) {
  const int64_t K4 = padded(a.K), stride = panel_bytes(a.K);
  const int8_t* w = a.w + p0 * stride;
  __m512i acc[MR][NP];
  for (int m = 0; m < MR; ++m)
    for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_setzero_si512();
  for (int64_t k = 0; k < K4; k += 4) {
    __m512i wv[NP];
    for (int p = 0; p < NP; ++p) wv[p] = _mm512_loadu_si512(w + p * stride + k * NR);
    for (int m = 0; m < MR; ++m) {
      int32_t four;
      std::memcpy(&four, a.x + (m0 + m) * K4 + k, 4);
      const __m512i xb = _mm512_set1_epi32(four);
      for (int p = 0; p < NP; ++p) acc[m][p] = _mm512_dpbusd_epi32(acc[m][p], xb, wv[p]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const Panel panel(a, p0 + p, p == NP - 1 ? cols_last : NR);
    for (int m = 0; m < MR; ++m) panel.finish(acc[m][p], m0 + m);
  }
}

// Four panels at a time at one to three rows, two from four (eight to twelve accumulators);
// two panels at a time through the blocks of rows.
struct Panels {
  static constexpr int of(int rows) { return rows <= 3 ? 4 : 2; }
};

void run(const Product& a, int64_t rows) {
  zoo::common::schedule<Panels>(
      rows, a.N, BLOCK, 2, [&](auto mr, auto np, int64_t m, int64_t p, int64_t cols) {
        micro<decltype(mr)::value, decltype(np)::value>(a, m, p, cols);
      });
}
