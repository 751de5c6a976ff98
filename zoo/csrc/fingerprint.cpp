// zoo::fingerprint: a 64-bit digest of a tensor's bytes, read once at the memory's rate.
// zoo.ops.Linear keeps packed copies of its weight; a write through ``.data`` or a NumPy view
// changes the weight without telling torch (its version counter stays), so the copies are
// checked against this digest of the weight before they are trusted (zoo/ops.py).
//
// Two polynomial hashes of the 32-bit words, modulo 2^32, in eight lanes each (odd
// multipliers, so a change of any one word always changes both), then each thread's lanes
// mixed into 64 bits with its block's index. Not a cryptographic hash: it detects changes, it
// does not resist a forger.
#include <ATen/Parallel.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cstdint>
#include <algorithm>
#include <cstring>
#include <vector>

namespace {

constexpr uint32_t kM1 = 0x9E3779B1u;  // odd: multiplying by it is invertible modulo 2^32
constexpr uint32_t kM2 = 0x85EBCA77u;
constexpr int64_t kGrain = 1 << 18;  // words a thread hashes as one block

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

// The digest of words [0, n) of one block; lanes are vectorised by the compiler.
__attribute__((target("avx2"))) uint64_t block_digest(const unsigned char* p, int64_t n) {
  uint32_t a[8], b[8];
  for (int l = 0; l < 8; ++l) a[l] = b[l] = static_cast<uint32_t>(l + 1);
  int64_t i = 0;
  for (; i + 8 <= n; i += 8)
    for (int l = 0; l < 8; ++l) {
      const uint32_t w = word(p, i + l);
      a[l] = a[l] * kM1 + w;
      b[l] = b[l] * kM2 + (w ^ 0x5BD1E995u);
    }
  uint64_t h = static_cast<uint64_t>(n);
  for (; i < n; ++i) h = mix(h ^ word(p, i));
  for (int l = 0; l < 8; ++l) h = mix(h ^ (static_cast<uint64_t>(a[l]) << 32 | b[l]));
  return h;
}

}  // namespace

namespace zoo {

int64_t fingerprint(const at::Tensor& t) {
  TORCH_CHECK(t.device().is_cpu(), "zoo::fingerprint: a CPU tensor, not one on ", t.device());
  TORCH_CHECK(t.is_contiguous(), "zoo::fingerprint: a contiguous tensor (call .contiguous())");
  const int64_t bytes = t.numel() * static_cast<int64_t>(t.element_size());
  const auto* data = static_cast<const unsigned char*>(t.const_data_ptr());
  const int64_t words = bytes / 4;
  const int64_t blocks = (words + kGrain - 1) / kGrain;
  std::vector<uint64_t> digests(static_cast<size_t>(blocks));
  at::parallel_for(0, blocks, 1, [&](int64_t b0, int64_t b1) {
    for (int64_t b = b0; b < b1; ++b) {
      const int64_t start = b * kGrain;
      const int64_t end = std::min(words, start + kGrain);
      digests[static_cast<size_t>(b)] = block_digest(data + 4 * start, end - start);
    }
  });
  uint64_t h = mix(static_cast<uint64_t>(bytes) ^ 0x2545F4914F6CDD1Dull);
  for (int64_t b = 0; b < blocks; ++b) h = mix(h ^ mix(digests[static_cast<size_t>(b)] + b));
  for (int64_t i = words * 4; i < bytes; ++i) h = mix(h ^ data[i]);  // bytes past the words
  return static_cast<int64_t>(h);
}

}  // namespace zoo

TORCH_LIBRARY_FRAGMENT(zoo, m) { m.def("fingerprint(Tensor t) -> int"); }

TORCH_LIBRARY_IMPL(zoo, CPU, m) { m.impl("fingerprint", zoo::fingerprint); }
