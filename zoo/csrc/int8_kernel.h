// The int8 product's kernel (int8_linear.cpp), included once per instruction set inside a
// namespace that defines dot(acc, x, w), acc += four u8 x s8 products a lane, with the
// compiler's target set for it. No include guard: it is meant to be included several times.

// MR rows of x against NP panels: y[m][0 .. cols) of each, cols < NR only in the last.
template <int MR, int NP>
inline void micro(
    const Product& a, int64_t m0, int64_t p0, int64_t cols_last) {
  const int64_t K4 = padded(a.K), stride = panel_bytes(a.K);
  const int8_t* w = a.w + p0 * stride;
  __m256i acc[MR][2 * NP];
  for (int m = 0; m < MR; ++m)
    for (int j = 0; j < 2 * NP; ++j) acc[m][j] = _mm256_setzero_si256();
  for (int64_t k = 0; k < K4; k += 4) {
    __m256i wv[2 * NP];
    for (int p = 0; p < NP; ++p) {
      const int8_t* at = w + p * stride + k * NR;
      wv[2 * p] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at));
      wv[2 * p + 1] = _mm256_loadu_si256(reinterpret_cast<const __m256i*>(at + 32));
    }
    for (int m = 0; m < MR; ++m) {
      int32_t four;
      std::memcpy(&four, a.x + (m0 + m) * K4 + k, 4);
      const __m256i xb = _mm256_set1_epi32(four);
      for (int j = 0; j < 2 * NP; ++j) acc[m][j] = dot(acc[m][j], xb, wv[j]);
    }
  }
  for (int p = 0; p < NP; ++p) {
    const int64_t cols = p == NP - 1 ? cols_last : NR;
    const int8_t* tail = w + p * stride + K4 * NR;
    const float* scale = reinterpret_cast<const float*>(tail);
    const int32_t* sums = reinterpret_cast<const int32_t*>(tail + NR * 4);
    const float* bp = a.b ? a.b + (p0 + p) * NR : nullptr;
    const __m256i z = _mm256_set1_epi32(int32_t(a.z));
    for (int m = 0; m < MR; ++m) {
      const __m256 xs = _mm256_set1_ps(a.xscale[m0 + m]);
      float* out = a.y + (m0 + m) * a.N + (p0 + p) * NR;
      alignas(32) float tmp[NR];
      for (int h = 0; h < 2; ++h) {
        const __m256i zs = _mm256_mullo_epi32(
            z, _mm256_loadu_si256(reinterpret_cast<const __m256i*>(sums + 8 * h)));
        const __m256 v = _mm256_cvtepi32_ps(_mm256_sub_epi32(acc[m][2 * p + h], zs));
        const __m256 s = _mm256_mul_ps(xs, _mm256_loadu_ps(scale + 8 * h));
        const __m256 bv = bp && cols == NR ? _mm256_loadu_ps(bp + 8 * h) : _mm256_setzero_ps();
        const __m256 r = _mm256_fmadd_ps(v, s, bv);
        if (cols == NR)
          _mm256_storeu_ps(out + 8 * h, r);
        else
          _mm256_store_ps(tmp + 8 * h, r);
      }
      if (cols != NR)
        for (int64_t j = 0; j < cols; ++j) out[j] = tmp[j] + (bp ? bp[j] : 0.f);
    }
  }
}

// Four panels at a time at one row, two at two or three, one from four (eight to twelve
// accumulators).
struct Panels {
  static constexpr int of(int rows) { return rows == 1 ? 4 : rows <= 3 ? 2 : 1; }
};

void run(const Product& a, int64_t rows) {
  zoo::common::schedule<Panels>(
      rows, a.N, BLOCK, 1, [&](auto mr, auto np, int64_t m, int64_t p, int64_t cols) {
        micro<decltype(mr)::value, decltype(np)::value>(a, m, p, cols);
      });
}
