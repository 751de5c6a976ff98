// zoo::common::weight_zeros: the memory of zoo's packed weights, in slabs backed by 2 MiB pages.
//
// A product reads each weight once a call, and a call after a pause reads them from memory: on
// the 2-core Xeon this project runs on (a virtual machine), 45 MB read 200 ms after they were
// last read took 19 ms in 4 KiB pages and 2.6 to 8 ms in 2 MiB pages, where back to back they
// take 3 ms. A 4 KiB page is one translation to look up for every 4 KiB read, each through the
// guest's and the host's page tables; a 2 MiB page is one for 512 of them. Linux backs memory
// with 2 MiB pages where it is asked to (madvise MADV_HUGEPAGE; transparent huge pages in
// "madvise" mode, the usual default), and only in whole, aligned 2 MiB ranges: a weight of a
// few hundred KiB in memory of its own never gets one. So weights are laid one after another in
// slabs of 32 MiB (or one weight's size, rounded up), each aligned to 2 MiB; a slab is unmapped
// once no weight in it is held and it is not the one being filled. ZOO_HUGE_PAGES=0 keeps
// at::zeros' memory (to compare).
#include "weight_memory.h"

#include <ATen/Functions.h>
#include <c10/util/Exception.h>

#include <sys/mman.h>

#include <algorithm>
#include <cstdint>
#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>

namespace {

constexpr size_t kPage = size_t(2) << 20;  // a huge page: 2 MiB
constexpr size_t kSlab = size_t(32) << 20;
constexpr size_t kAlign = 64;              // each weight's start: a cache line

struct Slab {
  void* mapping = nullptr;
  size_t mapped = 0;
  char* base = nullptr;  // the first 2 MiB boundary in the mapping
  size_t size = 0, used = 0;

  ~Slab() {
    if (mapping) munmap(mapping, mapped);
  }
};

size_t round_up(size_t n, size_t to) { return (n + to - 1) / to * to; }

bool wanted() {
  static const bool on = [] {
    const char* env = std::getenv("ZOO_HUGE_PAGES");
    return !(env && std::strcmp(env, "0") == 0);
  }();
  return on;
}

std::shared_ptr<Slab> new_slab(size_t bytes) {
  auto slab = std::make_shared<Slab>();
  slab->size = std::max(kSlab, round_up(bytes, kPage));
  slab->mapped = slab->size + kPage;  // room to start at a 2 MiB boundary
  void* p = mmap(nullptr, slab->mapped, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1,
                 0);
  if (p == MAP_FAILED) return nullptr;
  slab->mapping = p;
  slab->base = reinterpret_cast<char*>(round_up(reinterpret_cast<uintptr_t>(p), kPage));
#ifdef MADV_HUGEPAGE  // (Linux's; elsewhere the slabs are plain memory)
  madvise(slab->base, slab->size, MADV_HUGEPAGE);  // a request: refused, 4 KiB pages serve
#endif
  return slab;
}

std::mutex lock;
std::shared_ptr<Slab> current;  // the slab new weights go into

}  // namespace

namespace zoo::common {

at::Tensor weight_zeros(int64_t numel, const at::TensorOptions& options) {
  const size_t bytes = size_t(numel) * options.dtype().itemsize();
  if (!wanted() || bytes == 0) return at::zeros({numel}, options);
  std::shared_ptr<Slab> slab;
  char* at = nullptr;
  {
    std::lock_guard<std::mutex> hold(lock);
    if (!current || current->used + bytes > current->size) {
      std::shared_ptr<Slab> fresh = new_slab(bytes);
      if (!fresh) return at::zeros({numel}, options);
      // a weight larger than a slab gets one of its own; the slab being filled stays current
      if (bytes > kSlab && current) {
        slab = fresh;
      } else {
        current = fresh;
      }
    }
    if (!slab) {
      slab = current;
      at = slab->base + slab->used;
      slab->used = round_up(slab->used + bytes, kAlign);
    } else {
      at = slab->base;
    }
  }
  // fresh anonymous memory is zero; each weight holds its slab, unmapped after the last
  return at::from_blob(at, {numel}, [slab](void*) {}, options);
}

}  // namespace zoo::common
