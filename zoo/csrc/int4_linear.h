// zoo's 4-bit packed weights (int4_linear.cpp), which zoo::packed_linear multiplies as it does
// its float32 and int8 ones.
#pragma once

#include <ATen/core/Tensor.h>

#include "packed_linear.h"

namespace zoo {

// q (out_features, in_features / 2, uint8: two signed 4-bit values a byte, the even column in
// the low half) and its scales (out_features, in_features / 32, float16: one a group of 32
// columns) in panels of 16 outputs, after a 64-byte header that says what it is and holds
// out_features and in_features.
at::Tensor pack_int4_weight(const at::Tensor& q, const at::Tensor& scale);

// What a 4-bit packed weight's header starts with.
constexpr int64_t kInt4PackMagic = 0x7a6f6f5061636b34;  // "zooPack4"

// The outputs and inputs of a weight packed by pack_int4_weight; a ValueError naming ``op``
// for anything else.
PackedShape int4_packed_shape(const at::Tensor& packed, const char* op);

// y = x (q d)^T + bias into y, for x (rows, K) contiguous float32 (each group of 32 values of
// a row rounded to int8 first, llama.cpp's q8_0) and ``packed`` checked by int4_packed_shape.
void int4_product(const at::Tensor& x, const at::Tensor& packed, const float* bias,
                  at::Tensor& y, int64_t K, int64_t n_out);

}  // namespace zoo
