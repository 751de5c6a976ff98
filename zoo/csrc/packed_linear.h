// zoo::packed_linear, for the other sources of zoo's native library (packed_linear.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <optional>

namespace zoo {

// W (out_features, in_features) in panels of 16 outputs, after a header of 16 floats that
// says what it is and holds out_features and in_features: 16 + panels * in_features * 16
// floats.
at::Tensor pack_linear_weight(const at::Tensor& weight);

// The outputs and inputs of a weight packed by pack_linear_weight or pack_int8_weight; a
// ValueError naming ``op``
// for anything else.
struct PackedShape {
  int64_t n_out, n_in;
};
PackedShape packed_shape(const at::Tensor& packed, const char* op);

// What a packed weight's header starts with.
constexpr int64_t kPackMagic = 0x7a6f6f5061636b31;  // "zooPack1"

// y = x W^T + b (float32, CPU) with W packed by pack_linear_weight, by pack_int8_weight
// (int8_linear.h: then W = Q * scale) or by pack_int4_weight (int4_linear.h); n_out = W's rows.
at::Tensor packed_linear(const at::Tensor& x, const at::Tensor& packed,
                         const std::optional<at::Tensor>& bias, int64_t n_out);

}  // namespace zoo
