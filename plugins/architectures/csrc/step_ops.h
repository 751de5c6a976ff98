// The small operators of zoo::decoder_layers' step (step_ops.cpp).
#pragma once

#include <ATen/core/Tensor.h>

#include <cstdint>

namespace zoo::step {

// out = LayerNorm(x) over rows of d floats (weight and bias may be null).
// A LayerNorm's scale and shift (either null: none) and eps.
struct Affine {
  const float* weight;
  const float* bias;
  double eps;
};

void layer_norm(const float* x, float* out, int64_t rows, int64_t d, const Affine& a);

// out = RMSNorm(x) over rows of d floats (Zhang & Sennrich 2019): x / sqrt(mean(x^2) + eps),
// times weight (may be null).
void rms_norm(const float* x, float* out, int64_t rows, int64_t d, const float* weight,
              double eps);

// y = x M for a row x of ``width`` floats and a (width, width) matrix M, row-major: a
// rotation of queries and keys (RoPE's, as the Python step's module computes it for a
// position, given as its matrix).
void rotate(const float* x, float* y, const float* m, int64_t width);

// a += x over n floats.
void add(float* a, const float* x, int64_t n);

// One query per row and head against keys and values laid out (key row, key head, position,
// width): row r reads key row r / groups, positions [0, length) of stride_length; query head h
// reads key head h / (heads / kv_heads) (grouped-query attention; kv_heads = heads without).
struct Attention {
  const float* q;    // row r, head h at q + r * q_stride + h * width
  int64_t q_stride;
  const float* k;
  const float* v;
  int64_t rows, heads, width, groups, length, stride_length, kv_heads;
  const bool* keep;  // (key rows, keep_stride): false where a key is padding; or null
  int64_t keep_stride;
  float scale;
  const float* bias;  // head h, key j: bias[h * length + j] added to the scaled score
                      // (T5's relative positions, computed for this step); or null
  float softcap = 0.f;  // scaled scores soft-capped to (-cap, cap) before the bias (Gemma 2);
                        // 0: none
};

// softmax(scale q k^T + bias, -inf where not kept) v: (rows, 1, heads * width), float32.
at::Tensor attend(const Attention& a);

// Self-attention of texts packed one after another (packed_attention.cpp): text t is rows
// [starts[t], starts[t + 1]) of qkv, each row its queries (heads x width), keys and values
// (kv_heads x width each), ``stride`` floats apart; each query attends to its own text's keys.
struct PackedAttention {
  const float* qkv;
  int64_t stride;
  const int64_t* starts;  // texts + 1 entries
  int64_t texts, rows, heads, kv_heads, width;
  float scale;
};

// softmax(scale q k^T) v of each text: (rows, 1, heads * width), float32.
at::Tensor attend_packed(const PackedAttention& a);

}  // namespace zoo::step
