// zoo::fingerprint: a 64-bit digest of a tensor's bytes, read once at the memory's rate.
// zoo.ops.Linear keeps packed copies of its weight; a write through ``.data`` or a NumPy view
// changes the weight without telling torch (its version counter stays), so the copies are
// checked against this digest of the weight before they are trusted (zoo/ops.py).
//
// Two polynomial hashes of the 32-bit words, modulo 2^32, in 32 lanes each (odd
// multipliers, so a change of any one word always changes both), then each block's lanes
// mixed into 64 bits with its block's index. Not a cryptographic hash: it detects changes, it
// does not resist a forger. The 32 lanes are four independent 256-bit chains per hash: with
// one chain, each multiply waited for the last and a block was read at 9.5 GB/s (one thread
// of the AVX-512 EPYC), below the memory's rate.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <immintrin.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

namespace {

constexpr uint32_t kM1 = 0x9E3779B1u;  // odd: multiplying by it is invertible modulo 2^32
constexpr uint32_t kM2 = 0x85EBCA77u;
constexpr int64_t kGrain = 1 << 16;  // words hashed as one block (256 KiB: a 512 x 512
                                     // int8 weight is one; a list's blocks share the threads)

inline uint64_t mix(uint64_t h) {  // splitmix64's finaliser
  h ^= h >> 30;
  h *= 0xBF58476D1CE4E5B9ull;
  h ^= h >> 27;
  h *= 0x94D049BB133111EBull;
  return h ^ (h >> 31);
}

// Word i of p, wherever p lies (an int8 tensor's view may start at any byte).
inline uint32_t word(const unsigned char* p, int64_t i) {
  uint32_t w;
  std::memcpy(&w, p + 4 * i, 4);
  return w;
}

// The digest of words [0, n) of one block: lane l of chain c takes words 32 i + 8 c + l.
__attribute__((target("avx2"))) uint64_t block_digest(const unsigned char* p, int64_t n) {
  constexpr int kChains = 4;
  const __m256i m1 = _mm256_set1_epi32(static_cast<int>(kM1));
  const __m256i m2 = _mm256_set1_epi32(static_cast<int>(kM2));
  const __m256i flip = _mm256_set1_epi32(0x5BD1E995);
  __m256i a[kChains], b[kChains];
  for (int c = 0; c < kChains; ++c)
    a[c] = b[c] = _mm256_setr_epi32(8 * c + 1, 8 * c + 2, 8 * c + 3, 8 * c + 4, 8 * c + 5,
                                    8 * c + 6, 8 * c + 7, 8 * c + 8);
  int64_t i = 0;
  for (; i + 8 * kChains <= n; i += 8 * kChains)
    for (int c = 0; c < kChains; ++c) {
      const __m256i w =
          _mm256_loadu_si256(reinterpret_cast<const __m256i*>(p + 4 * (i + 8 * c)));
      a[c] = _mm256_add_epi32(_mm256_mullo_epi32(a[c], m1), w);
      b[c] = _mm256_add_epi32(_mm256_mullo_epi32(b[c], m2), _mm256_xor_si256(w, flip));
    }
  uint64_t h = static_cast<uint64_t>(n);
  for (; i < n; ++i) h = mix(h ^ word(p, i));
  uint32_t la[8 * kChains], lb[8 * kChains];
  for (int c = 0; c < kChains; ++c) {
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(la + 8 * c), a[c]);
    _mm256_storeu_si256(reinterpret_cast<__m256i*>(lb + 8 * c), b[c]);
  }
  for (int l = 0; l < 8 * kChains; ++l) h = mix(h ^ (static_cast<uint64_t>(la[l]) << 32 | lb[l]));
  return h;
}

}  // namespace

namespace zoo {

// fingerprint of each tensor, in one call: a model's hundred tensors checked at once cost their
// bytes' reading, not a hundred calls from Python (a few microseconds each). The blocks of all
// of them are shared among the threads: a weight of one block (a 512 x 512 int8 one) no longer
// keeps the other threads waiting.
std::vector<int64_t> fingerprints(at::TensorList tensors) {
  struct Of {
    const unsigned char* data;
    int64_t bytes, words, first;  // first: its first block among all
  };
  std::vector<Of> of;
  int64_t blocks = 0;
  for (const at::Tensor& t : tensors) {
    TORCH_CHECK(t.device().is_cpu(), "zoo::fingerprint: a CPU tensor, not one on ", t.device());
    TORCH_CHECK(t.is_contiguous(), "zoo::fingerprint: a contiguous tensor (call .contiguous())");
    const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
    of.push_back({static_cast<const unsigned char*>(t.const_data_ptr()), bytes, bytes / 4,
                  blocks});
    blocks += (bytes / 4 + kGrain - 1) / kGrain;
  }
  std::vector<uint64_t> digests(static_cast<size_t>(blocks));
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    size_t i = 0;  // the tensor of block b
    for (int64_t b = b0; b < b1; ++b) {
      while (i + 1 < of.size() && of[i + 1].first <= b) ++i;
      const int64_t start = (b - of[i].first) * kGrain;
      const int64_t end = std::min(of[i].words, start + kGrain);
      digests[static_cast<size_t>(b)] = block_digest(of[i].data + 4 * start, end - start);
    }
  });
  std::vector<int64_t> out;
  out.reserve(of.size());
  for (const Of& t : of) {
    uint64_t h = mix(static_cast<uint64_t>(t.bytes) ^ 0x2545F4914F6CDD1Dull);
    const int64_t own = (t.words + kGrain - 1) / kGrain;
    for (int64_t b = 0; b < own; ++b)
      h = mix(h ^ mix(digests[static_cast<size_t>(t.first + b)] + b));
    for (int64_t i = t.words * 4; i < t.bytes; ++i) h = mix(h ^ t.data[i]);  // past the words
    out.push_back(static_cast<int64_t>(h));
  }
  return out;
}

int64_t fingerprint(const at::Tensor& t) { return fingerprints({t})[0]; }

}  // namespace zoo

TORCH_LIBRARY_FRAGMENT(zoo, m) {
  m.def("fingerprint(Tensor t) -> int");
  m.def("fingerprints(Tensor[] tensors) -> int[]", &zoo::fingerprints);
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) { m.impl("fingerprint", zoo::fingerprint); }
