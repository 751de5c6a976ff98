// The small operators of zoo::decoder_layers' step (step_ops.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zoo::step {

// out = LayerNorm(x) over rows of d floats (weight and bias may be null).
void layer_norm(const float* x, float* out, int64_t rows, int64_t d, const float* weight,
                const float* bias, double eps);

// out = RMSNorm(x) over rows of d floats (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps),
// times weight (may be null).
void rms_norm(const float* x, float* out, int64_t rows, int64_t d, const float* weight,
              double eps);

// a += x over n floats.
void add(float* a, const float* x, int64_t n);

// One query per row and head against keys and values laid out (key row, head, position,
// width): row r reads key row r / groups, positions [0, length) of stride_length.
struct Attention {
  const float* q;    // row r, head h at q + r * q_stride + h * width
  int64_t q_stride;
  const float* k;
  const float* v;
  int64_t rows, heads, width, groups, length, stride_length;
  const bool* keep;  // (key rows, length): false where a key is padding; or null
  float scale;
  const float* bias;  // head h, key j: bias[h * length + j] added to the scaled score
                      // (T5's relative positions, computed for this step); or null
};

// softmax(scale q k^T + bias, -inf where not kept) v: (rows, 1, heads * width), float32.
at::Tensor attend(const Attention& a);

}  // namespace zoo::step
