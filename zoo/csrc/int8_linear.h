// zoo's int8 packed weights (int8_linear.cpp), which zoo::packed_linear multiplies as it does
// its float32 ones.
#pragma once

#include <ATen/core/Tensor.h>

#include <string>

#include "packed_linear.h"

namespace zoo {

// Q (out_features, in_features, int8) and its per-row scales in panels of 16 outputs (each:
// groups of four input columns, 64 bytes a group, then the 16 scales and the 16 sums of each
// output's weights), after a 64-byte header that says what it is and holds out_features and
// in_features.
at::Tensor pack_int8_weight(const at::Tensor& weight, const at::Tensor& scale);

// What an int8 packed weight's header starts with.
constexpr int64_t kInt8PackMagic = 0x7a6f6f5061636b38;  // "zooPack8"

// The outputs and inputs of a weight packed by pack_int8_weight; a ValueError naming ``op``
// for anything else.
PackedShape int8_packed_shape(const at::Tensor& packed, const char* op);

// True where x keeps 8 bits (VNNI's int32 sums), false on AVX2 alone (7 bits).
bool int8_full_range();

// What the int8 products run on here, in words (zoo env); whether from AMX_ROWS rows on
// AMX's tiles.
std::string int8_isa();
bool int8_on_amx();

// y = (x Q^T) * scale + bias into y, for x (rows, K) contiguous float32 and ``packed`` checked
// by int8_packed_shape.
void int8_product(const at::Tensor& x, const at::Tensor& packed, const float* bias,
                  at::Tensor& y, int64_t K, int64_t n_out);

}  // namespace zoo
