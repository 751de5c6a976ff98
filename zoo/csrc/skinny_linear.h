// zoo::skinny_linear, for the other sources of zoo's native library (skinny_linear.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace zoo {

// y = x W^T + b for a few rows of x (float32, CPU, W contiguous), reading W once.
at::Tensor skinny_linear(const at::Tensor& x, const at::Tensor& weight,
                         const std::optional<at::Tensor>& bias);

}  // namespace zoo
