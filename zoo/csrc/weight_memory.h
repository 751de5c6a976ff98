// Where zoo's packed weights live: in slabs of memory backed by 2 MiB pages (weight_memory.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zoo::common {

// A zeroed contiguous 1-d tensor of ``numel`` elements of ``options``' dtype, for a weight that
// is read many times (a packed weight): in slabs of memory the kernel is asked to back with
// 2 MiB pages, else (no such memory here, or ZOO_HUGE_PAGES=0) at::zeros' memory.
at::Tensor weight_zeros(int64_t numel, const at::TensorOptions& options);

}  // namespace zoo::common
