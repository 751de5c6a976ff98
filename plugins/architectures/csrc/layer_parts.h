// What zoo's native decoding step (decoder_layers.cpp) and encoder pass (encoder_layers.cpp)
// share: one layer's tensors and settings, each a named field (LayerParts), the products,
// norms, activations and residual sums that read them, and the checks of a layer.
#pragma once

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cmath>
#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "packed_linear.h"
#include "step_ops.h"

namespace zoo::layer {

// A product of a layer: its weight (fp32, int8 with per-row scales, or uint8 holding two
// 4-bit values a byte), bias and the packed weight zoo::packed_linear reads
// (Linear.native_weight in Python).
struct Product {
  at::Tensor weight, packed;
  std::optional<at::Tensor> bias;
  bool given() const { return weight.defined(); }
  int64_t outputs() const { return weight.size(0); }
  int64_t inputs() const {
    return weight.scalar_type() == at::kByte ? 2 * weight.size(1) : weight.size(1);
  }
};

// A LayerNorm (weight, bias) or an RMSNorm (weight only), and its eps.
struct Norm {
  at::Tensor weight;
  std::optional<at::Tensor> bias;
  double eps = 0.0;
  bool given() const { return weight.defined(); }
};

// One layer's tensors and settings, by name. A new layer option is one field here, one
// setter of the plan's Layer, one use in a sublayer and one check.
struct LayerParts {
  Product qkv, self_out, cross_q, cross_out, fc1, fc2;
  Norm norm1, norm2, norm3;             // before (pre-norm) or after (post-norm) each sublayer
  Norm after_attention, after_network;  // a sandwich layer's norms of its sublayers' outputs
  at::Tensor q_norm, k_norm;            // each head's queries and keys RMS-normed (QK-norm)
  double head_eps = 0.0;
  double self_scale = 1.0, cross_scale = 1.0, score_cap = 0.0;
  int64_t activation = 0;  // 0 ReLU, 1 GELU, 2 tanh GELU, 3 SiLU
  int64_t window = 0;      // self-attention over the last ``window`` keys (0: all)
  bool pre = false, rms = false, gated = false, parallel = false;
};

constexpr int64_t PRODUCTS_PER_LAYER = 6;

inline const char* const kProductNames[PRODUCTS_PER_LAYER] = {
    "qkv", "self out", "cross q", "cross out", "fc1", "fc2"};

// Product ``which`` of a layer (0 q|k|v, 1 self out, 2 cross q, 3 cross out, 4 fc1, 5 fc2).
inline Product* product_of(LayerParts& p, int64_t which) {
  Product* all[PRODUCTS_PER_LAYER] = {&p.qkv, &p.self_out, &p.cross_q, &p.cross_out, &p.fc1,
                                      &p.fc2};
  TORCH_CHECK_VALUE(which >= 0 && which < PRODUCTS_PER_LAYER, "decoder_layers: product ",
                    which, " is none of the ", PRODUCTS_PER_LAYER, " of a layer");
  return all[which];
}

// The heads of every layer of a plan: queries' heads, a head's width, keys' and values' heads.
struct Heads {
  int64_t heads, width, kv_heads;
};

// The sizes one pass or step checks a layer by.
struct Sizes {
  int64_t d, rows, heads, kv_heads, width, length, sources, src_len, pos;
  bool cross;
};

inline at::Tensor linear(const at::Tensor& x, const Product& p) {
  return zoo::packed_linear(x, p.packed, p.bias, p.outputs());
}

inline const float* data_or_null(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->data_ptr<float>() : nullptr;
}

inline at::Tensor norm(const at::Tensor& x, const Norm& n, bool rms) {
  at::Tensor out = at::empty_like(x);
  const int64_t d = x.size(-1);
  if (rms)
    zoo::step::rms_norm(x.data_ptr<float>(), out.data_ptr<float>(), x.numel() / d, d,
                        n.weight.data_ptr<float>(), n.eps);
  else
    zoo::step::layer_norm(x.data_ptr<float>(), out.data_ptr<float>(), x.numel() / d, d,
                          {n.weight.data_ptr<float>(), data_or_null(n.bias), n.eps});
  return out;
}

// What a sublayer reads: ``x`` normed by ``n`` in a pre-norm layer, else ``x`` itself.
inline at::Tensor sublayer_input(const at::Tensor& x, const Norm& n, const LayerParts& p) {
  return p.pre ? norm(x, n, p.rms) : x;
}

inline at::Tensor activate(at::Tensor f, int64_t activation, bool gated, int64_t ff) {
  at::Tensor a = gated ? f.narrow(-1, 0, ff) : f;
  if (activation == 0)
    at::relu_(a);
  else if (activation == 3)
    at::silu_(a);
  else
    at::gelu_(a, activation == 2 ? "tanh" : "none");
  return gated ? at::mul(a, f.narrow(-1, ff, ff)) : f;
}

// A sublayer's output ``a`` added to ``x``: normed first by ``after`` where the layer has that
// after-norm (a sandwich layer), and the sum normed by ``n`` in a post-norm layer.
inline at::Tensor residual(at::Tensor a, const at::Tensor& x, const LayerParts& p, const Norm& n,
                           const Norm* after = nullptr) {
  if (after != nullptr && after->given()) a = norm(a, *after, p.rms);
  zoo::step::add(a.data_ptr<float>(), x.data_ptr<float>(), a.numel());
  return p.pre ? a : norm(a, n, p.rms);
}

// The feed-forward network of a layer on ``h`` (its input, normed where the layer says).
inline at::Tensor network(const LayerParts& p, const at::Tensor& h) {
  return linear(activate(linear(h, p.fc1), p.activation, p.gated, p.fc2.inputs()), p.fc2);
}

inline void expect(const at::Tensor& t, at::IntArrayRef shape, int64_t layer, const char* what,
                   bool quantized = false) {
  const bool low = t.defined() && (t.scalar_type() == at::kChar || t.scalar_type() == at::kByte);
  TORCH_CHECK_VALUE(t.defined() && t.device().is_cpu() &&
                        (t.scalar_type() == at::kFloat || (quantized && low)) &&
                        t.is_contiguous() && t.sizes() == shape,
                    "decoder_layers: layer ", layer, "'s ", what, " is ",
                    t.defined() ? t.toString() : "undefined", " of shape ",
                    t.defined() ? t.sizes() : at::IntArrayRef{}, (t.defined() &&
                    !t.is_contiguous()) ? " (not contiguous)" : "", "; a contiguous float32 "
                    "CPU tensor of shape ", shape,
                    quantized ? " (or int8, or uint8 of half the columns)" : "", " is needed");
}

// A product's weight, packed weight and bias fit ``outputs`` x ``inputs``.
inline void check_product(const Product& p, int64_t outputs, int64_t inputs, int64_t l,
                          const char* name) {
  TORCH_CHECK_VALUE(p.given(), "decoder_layers: layer ", l, " lacks its ", name, " weight");
  const bool int4 = p.weight.defined() && p.weight.scalar_type() == at::kByte;
  expect(p.weight, {outputs, int4 ? inputs / 2 : inputs}, l,
         (std::string(name) + " weight").c_str(), true);
  TORCH_CHECK_VALUE(p.packed.defined() &&
                        p.weight.scalar_type() == p.packed.scalar_type(),
                    "decoder_layers: layer ", l, "'s ", name, " weight is ",
                    p.weight.scalar_type(), " but its packed weight is ",
                    p.packed.defined() ? p.packed.toString() : "undefined");
  const auto shape = zoo::packed_shape(p.packed, "decoder_layers");
  TORCH_CHECK_VALUE(shape.n_out == outputs && shape.n_in == inputs, "decoder_layers: layer ", l,
                    "'s packed ", name, " weight is ", shape.n_out, " x ", shape.n_in, ", not ",
                    outputs, " x ", inputs);
  if (p.bias.has_value() && p.bias->defined())
    expect(*p.bias, {outputs}, l, (std::string(name) + " bias").c_str());
}

// A norm's weight (and bias, which an RMSNorm has not) are vectors of the width, its eps
// finite and not negative.
inline void check_norm(const Norm& n, int64_t d, bool rms, int64_t l, const char* name) {
  TORCH_CHECK_VALUE(n.given(), "decoder_layers: layer ", l, " lacks its ", name, " weight");
  expect(n.weight, {d}, l, (std::string(name) + " weight").c_str());
  const bool biased = n.bias.has_value() && n.bias->defined();
  TORCH_CHECK_VALUE(!rms || !biased, "decoder_layers: layer ", l, "'s ", name,
                    " bias is given, but an RMSNorm has none");
  if (biased) expect(*n.bias, {d}, l, (std::string(name) + " bias").c_str());
  TORCH_CHECK_VALUE(std::isfinite(n.eps) && n.eps >= 0, "decoder_layers: layer ", l, "'s ",
                    name, " eps is ", n.eps, "; finite and not negative");
}

// Every tensor and setting of layer ``l`` fits the sizes ``z`` (the buffers are checked by
// the step, which holds them).
inline void check_parts(const LayerParts& p, int64_t l, const Sizes& z) {
  const int64_t inner = z.heads * z.width, kv = z.kv_heads * z.width, d = z.d;
  TORCH_CHECK_VALUE(p.activation >= 0 && p.activation <= 3, "decoder_layers: layer ", l,
                    "'s activation code is ", p.activation,
                    "; 0 (ReLU), 1 (GELU), 2 (tanh GELU) or 3 (SiLU)");
  TORCH_CHECK_VALUE(p.fc2.given() && p.fc2.weight.dim() == 2, "decoder_layers: layer ", l,
                    " lacks its fc2 weight (a matrix)");
  const int64_t ff = p.fc2.inputs();  // a gated network's first product: two halves
  check_product(p.qkv, inner + 2 * kv, d, l, "qkv");
  check_product(p.self_out, d, inner, l, "self out");
  if (z.cross) {
    check_product(p.cross_q, inner, d, l, "cross q");
    check_product(p.cross_out, d, inner, l, "cross out");
    check_norm(p.norm2, d, p.rms, l, "norm2");
  }
  check_product(p.fc1, p.gated ? 2 * ff : ff, d, l, "fc1");
  check_product(p.fc2, d, ff, l, "fc2");
  check_norm(p.norm1, d, p.rms, l, "norm1");
  check_norm(p.norm3, d, p.rms, l, "norm3");
  TORCH_CHECK_VALUE(p.after_attention.given() == p.after_network.given(),
                    "decoder_layers: layer ", l, " has one after-norm of two");
  if (p.after_attention.given()) {
    check_norm(p.after_attention, d, p.rms, l, "attention's after-norm");
    check_norm(p.after_network, d, p.rms, l, "network's after-norm");
  }
  if (p.q_norm.defined() || p.k_norm.defined()) {
    expect(p.q_norm, {z.width}, l, "query norm weight");
    expect(p.k_norm, {z.width}, l, "key norm weight");
  }
  TORCH_CHECK_VALUE(!p.parallel || (p.pre && !z.cross), "decoder_layers: layer ", l, " is "
                    "parallel, and only a pre-norm layer without cross-attention can be");
}

// x (B, L, d) through every layer as an encoder's (every token attends to every real token of
// its text; ``keep`` (B, L) false at padding): the layers the decoding step runs, without
// cross-attention, rotations, position biases or sliding windows (encoder_layers.cpp).
at::Tensor encoder_layers(const at::Tensor& x_in, const at::Tensor& keep_in,
                          const std::vector<const LayerParts*>& layers, const Heads& heads);

}  // namespace zoo::layer
