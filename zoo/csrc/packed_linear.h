// zoo::packed_linear, for the other sources of zoo's native library (packed_linear.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace zoo {

// W (out_features, in_features) in panels of 16 outputs: (panels, in_features, 16).
at::Tensor pack_linear_weight(const at::Tensor& weight);

// y = x W^T + b (float32, CPU) with W packed by pack_linear_weight; n_out = W's rows.
at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& packed,
                         const std::optional<at::Tensor>& bias, int64_t n_out);

}  // namespace zoo
