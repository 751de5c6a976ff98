// The int8 product's kernel on AMX tiles (int8_linear.cpp), for CPUs with AMX-INT8 (Intel's
// Sapphire Rapids and later): tdpbusd multiplies a tile of up to 16 rows of x's bytes (64 a
// row: 16 groups of four inputs) by a tile of 16 such groups of a panel (64 bytes each: four
// int8 weights of each of its 16 outputs, the packed weight's own layout, so a panel's tile is
// 1 KB read as it lies) and adds the products into a 16 x 16 tile of int32 sums: 16,384
// multiply-adds an instruction, 16 times vpdpbusd's on a 512-bit vector. The sums are the
// same integers, and the scaling after them int8_kernel512.h's (Panel), so the two kernels
// give the same bits. Rows go 32 at a time (two tiles of x) through two panels at a time
// (four tiles of sums), every 64 inputs; inputs whose count is not a multiple of 64 stay on
// the vector kernel. Included once, after int8_kernel512.h, in its namespace, compiled for
// AMX too; run only where amx_ready() says the CPU has the tiles and Linux lets the process
// use them.

// The tiles: 0-3 the sums (rows 0-15 and 16-31, each against two panels), 4 and 5 x's two
// row tiles, 6 and 7 the two panels' groups.
struct alignas(64) TileConfig {
  uint8_t palette = 1;
  uint8_t start_row = 0;
  uint8_t reserved[14] = {};
  uint16_t colsb[16] = {};
  uint8_t rows[16] = {};
};

inline void configure(int64_t first, int64_t second) {
  TileConfig c;
  const uint8_t r[8] = {uint8_t(first), uint8_t(first), uint8_t(second), uint8_t(second),
                        uint8_t(first), uint8_t(second), 16, 16};
  for (int t = 0; t < 8; ++t) {
    c.rows[t] = r[t];
    c.colsb[t] = r[t] ? 64 : 0;  // a tile of no rows is left unconfigured (never used)
  }
  // GCC 12 drops stores it does not see ldtilecfg read (the widths were lost): say it reads
  asm volatile("" : : "r"(&c) : "memory");
  _tile_loadconfig(&c);
}

// Rows m .. m + 16 (+ 16 more with TWO) of x against NP panels from p0 (the last with cols
// outputs), through the tiles configured for them.
template <bool TWO, int NP>
void tiles(const Product& a, int64_t m, int64_t first, int64_t second, int64_t p0,
           int64_t cols_last) {
  const int64_t K4 = padded(a.K), stride = panel_bytes(a.K);
  const uint8_t* x = a.x + m * K4;
  const int8_t* w = a.w + p0 * stride;
  _tile_zero(0);
  if (NP == 2) _tile_zero(1);
  if (TWO) _tile_zero(2);
  if (TWO && NP == 2) _tile_zero(3);
  for (int64_t k = 0; k < K4; k += 64) {
    _tile_loadd(4, x + k, K4);
    if (TWO) _tile_loadd(5, x + 16 * K4 + k, K4);
    _tile_loadd(6, w + k * NR, 64);  // groups k/4 .. k/4 + 16 of the panel, 64 bytes each
    _tile_dpbusd(0, 4, 6);
    if (TWO) _tile_dpbusd(2, 5, 6);
    if (NP == 2) {
      _tile_loadd(7, w + stride + k * NR, 64);
      _tile_dpbusd(1, 4, 7);
      if (TWO) _tile_dpbusd(3, 5, 7);
    }
  }
  alignas(64) int32_t sums[4][16 * 16];
  _tile_stored(0, sums[0], 64);
  if (NP == 2) _tile_stored(1, sums[1], 64);
  if (TWO) _tile_stored(2, sums[2], 64);
  if (TWO && NP == 2) _tile_stored(3, sums[3], 64);
  for (int p = 0; p < NP; ++p) {
    const Panel panel(a, p0 + p, p == NP - 1 ? cols_last : NR);
    for (int64_t r = 0; r < first; ++r)
      panel.finish(_mm512_load_si512(sums[p] + r * 16), m + r);
    for (int64_t r = 0; r < second; ++r)
      panel.finish(_mm512_load_si512(sums[2 + p] + r * 16), m + 16 + r);
  }
}

// Every row of x against every panel: tasks of BLOCK panels over the threads; in a task, its
// panels go two at a time through each block of 32 rows (they stay in L2 between blocks).
void amx_run(const Product& a, int64_t rows) {
  const int64_t panels = (a.N + NR - 1) / NR, tasks = (panels + BLOCK - 1) / BLOCK;
  at::parallel_for(0, tasks, 1, [&](int64_t t0, int64_t t1) {
    int64_t shape = -1;
    for (int64_t t = t0; t < t1; ++t) {
      const int64_t p0 = t * BLOCK, p1 = std::min(panels, p0 + BLOCK);
      for (int64_t m = 0; m < rows; m += 32) {
        const int64_t first = std::min<int64_t>(16, rows - m);
        const int64_t second = std::min<int64_t>(16, rows - m - first);
        if (first * 17 + second != shape) {
          configure(first, second);
          shape = first * 17 + second;
        }
        zoo::common::over_groups<2>(p0, p1, a.N, [&](auto np, int64_t p, int64_t cols) {
          constexpr int NP = decltype(np)::value;
          if (second)
            tiles<true, NP>(a, m, first, second, p, cols);
          else
            tiles<false, NP>(a, m, first, 0, p, cols);
        });
      }
    }
    if (shape >= 0) _tile_release();
  });
}
