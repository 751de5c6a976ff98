// What zoo's native decoding step (decoder_layers.cpp) and encoder pass (encoder_layers.cpp)
// share: a layer's tensors in the order the caller lists them, the products, norms,
// activations and residual sums of a layer, and the checks of a layer's tensors.
#pragma once

#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include <cstdint>
#include <optional>

#include "packed_linear.h"
#include "step_ops.h"

namespace zoo::layer {

// The tensors of one layer, in the order the caller lists them.
enum Param {
  QKV_W, QKV_B, SELF_OUT_W, SELF_OUT_B, CROSS_Q_W, CROSS_Q_B, CROSS_OUT_W, CROSS_OUT_B,
  FC1_W, FC1_B, FC2_W, FC2_B, NORM1_W, NORM1_B, NORM2_W, NORM2_B, NORM3_W, NORM3_B,
  Q_NORM_W, K_NORM_W, AFTER1_W, AFTER1_B, AFTER3_W, AFTER3_B, PARAMS_PER_LAYER
};

using Params = c10::List<std::optional<at::Tensor>>;

// The packed weights of a layer's six products, in the order of Param's weights.
constexpr int64_t PRODUCTS_PER_LAYER = 6;

inline const char* const kParamNames[PARAMS_PER_LAYER] = {
    "qkv weight", "qkv bias", "self out weight", "self out bias", "cross q weight",
    "cross q bias", "cross out weight", "cross out bias", "fc1 weight", "fc1 bias",
    "fc2 weight", "fc2 bias", "norm1 weight", "norm1 bias", "norm2 weight", "norm2 bias",
    "norm3 weight", "norm3 bias", "query norm weight", "key norm weight",
    "attention's after-norm weight", "attention's after-norm bias",
    "network's after-norm weight", "network's after-norm bias"};

inline at::Tensor get(const Params& p, int64_t layer, Param which) {
  std::optional<at::Tensor> t = p.get(layer * PARAMS_PER_LAYER + which);
  TORCH_CHECK_VALUE(t.has_value() && t->defined(), "decoder_layers: layer ", layer, " lacks its ",
                    kParamNames[which]);
  return *t;
}

inline std::optional<at::Tensor> maybe(const Params& p, int64_t layer, Param which) {
  return p.get(layer * PARAMS_PER_LAYER + which);
}

inline at::Tensor linear(const at::Tensor& x, const Params& p, at::TensorList packed, int64_t layer,
                  Param w) {
  return zoo::packed_linear(x, packed[layer * PRODUCTS_PER_LAYER + w / 2],
                            maybe(p, layer, Param(w + 1)), get(p, layer, w).size(0));
}

inline const float* data_or_null(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->data_ptr<float>() : nullptr;
}

// LayerNorm (or RMSNorm, where ``rms``) of x's rows by the norm ``w`` of ``layer``, into a
// new tensor.
inline at::Tensor norm(const at::Tensor& x, const Params& p, int64_t layer, Param w, double eps,
                bool rms) {
  const at::Tensor weight = get(p, layer, w);
  at::Tensor out = at::empty_like(x);
  const int64_t d = x.size(-1);
  if (rms)
    zoo::step::rms_norm(x.data_ptr<float>(), out.data_ptr<float>(), x.numel() / d, d,
                        weight.data_ptr<float>(), eps);
  else
    zoo::step::layer_norm(x.data_ptr<float>(), out.data_ptr<float>(), x.numel() / d, d,
                          weight.data_ptr<float>(),
                          data_or_null(maybe(p, layer, Param(w + 1))), eps);
  return out;
}

// The activation of a network's hidden layer, in place; gated (``ff`` of 2 ff columns): the
// first half activated times the second, into a new tensor of ff columns.
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

// x + a after a sublayer: written into a (a new tensor of the step), then normed
// after (post-norm) or not (pre-norm: the next sublayer norms its input itself). A
// sandwich layer (Gemma 2 and 3) norms a itself first, by its after-norm ``after``.
inline at::Tensor residual(at::Tensor a, const at::Tensor& x, bool pre, const Params& p,
                           int64_t layer, Param w, double eps, bool rms,
                           Param after = PARAMS_PER_LAYER, double after_eps = 0.0) {
  if (after != PARAMS_PER_LAYER && maybe(p, layer, after).has_value() &&
      maybe(p, layer, after)->defined())
    a = norm(a, p, layer, after, after_eps, rms);
  zoo::step::add(a.data_ptr<float>(), x.data_ptr<float>(), a.numel());
  return pre ? a : norm(a, p, layer, w, eps, rms);
}

// A float32 (or, for a product's weight, int8) CPU tensor of exactly ``shape``, contiguous;
// else a ValueError naming it.
inline void expect(const at::Tensor& t, at::IntArrayRef shape, int64_t layer, const char* what,
            bool int8 = false) {
  TORCH_CHECK_VALUE(t.defined() && t.device().is_cpu() &&
                        (t.scalar_type() == at::kFloat || (int8 && t.scalar_type() == at::kChar)) &&
                        t.is_contiguous() && t.sizes() == shape,
                    "decoder_layers: layer ", layer, "'s ", what, " is ",
                    t.defined() ? t.toString() : "undefined", " of shape ",
                    t.defined() ? t.sizes() : at::IntArrayRef{}, (t.defined() &&
                    !t.is_contiguous()) ? " (not contiguous)" : "", "; a contiguous float32 "
                    "CPU tensor of shape ", shape, int8 ? " (or int8)" : "", " is needed");
}

// The step's sizes: d (the model's width), rows, heads (kv_heads of keys and values) x width,
// the buffers' length, the sources and their length (none without cross-attention).
struct Sizes {
  int64_t d, rows, heads, kv_heads, width, length, sources, src_len, pos;
  bool cross;
};

// Every tensor and number of layer l, checked against the step's sizes before a byte is read.
inline void check_layer(const Params& p, at::TensorList packed, int64_t l, const Sizes& z,
                 const at::Tensor& kb, const at::Tensor& vb, at::TensorList cross_k,
                 at::TensorList cross_v, int64_t activation, bool gated, bool rms,
                 const std::optional<at::Tensor>& bias) {
  const int64_t inner = z.heads * z.width, kv = z.kv_heads * z.width, d = z.d;
  if (kb.defined() || vb.defined()) {  // (an encoder's pass has no buffers)
    expect(kb, {z.rows, z.kv_heads, z.length, z.width}, l, "self-attention key buffer");
    expect(vb, {z.rows, z.kv_heads, z.length, z.width}, l, "self-attention value buffer");
  }
  if (z.cross) {
    expect(cross_k[l], {z.sources, z.heads, z.src_len, z.width}, l, "cross-attention keys");
    expect(cross_v[l], {z.sources, z.heads, z.src_len, z.width}, l, "cross-attention values");
  }
  TORCH_CHECK_VALUE(activation >= 0 && activation <= 3, "decoder_layers: layer ", l,
                    "'s activation code is ", activation,
                    "; 0 (ReLU), 1 (GELU), 2 (tanh GELU) or 3 (SiLU)");
  if (bias.has_value() && bias->defined())
    expect(*bias, {z.heads, z.pos + 1}, l, "self-attention position bias");
  // the hidden width, from the second product (a gated network's first gives two halves)
  const int64_t ff = get(p, l, FC2_W).dim() == 2 ? get(p, l, FC2_W).size(1) : -1;
  const int64_t shapes[PRODUCTS_PER_LAYER][2] = {  // (outputs, inputs) of each product
      {inner + 2 * kv, d}, {d, inner}, {inner, d}, {d, inner}, {gated ? 2 * ff : ff, d},
      {d, ff}};
  for (int64_t i = 0; i < PRODUCTS_PER_LAYER; ++i) {
    const Param w = Param(2 * i);
    if (!z.cross && (w == CROSS_Q_W || w == CROSS_OUT_W)) continue;  // not read
    const at::Tensor weight = get(p, l, w);
    expect(weight, {shapes[i][0], shapes[i][1]}, l, kParamNames[w], true);
    TORCH_CHECK_VALUE((weight.scalar_type() == at::kChar) ==
                          (packed[l * PRODUCTS_PER_LAYER + i].scalar_type() == at::kChar),
                      "decoder_layers: layer ", l, "'s ", kParamNames[w], " is ",
                      weight.scalar_type(), " but its packed weight is ",
                      packed[l * PRODUCTS_PER_LAYER + i].scalar_type());
    const auto shape = zoo::packed_shape(packed[l * PRODUCTS_PER_LAYER + i], "decoder_layers");
    TORCH_CHECK_VALUE(shape.n_out == shapes[i][0] && shape.n_in == shapes[i][1],
                      "decoder_layers: layer ", l, "'s packed ", kParamNames[w], " is ",
                      shape.n_out, " x ", shape.n_in, ", not ", shapes[i][0], " x ",
                      shapes[i][1]);
    const std::optional<at::Tensor> b = maybe(p, l, Param(w + 1));
    if (b.has_value() && b->defined()) expect(*b, {shapes[i][0]}, l, kParamNames[w + 1]);
  }
  for (Param w : {NORM1_W, NORM2_W, NORM3_W}) {
    if (!z.cross && w == NORM2_W) continue;
    expect(get(p, l, w), {d}, l, kParamNames[w]);
    const std::optional<at::Tensor> b = maybe(p, l, Param(w + 1));
    TORCH_CHECK_VALUE(!rms || !b.has_value() || !b->defined(), "decoder_layers: layer ", l,
                      "'s ", kParamNames[w + 1], " is given, but an RMSNorm has none");
    if (b.has_value() && b->defined()) expect(*b, {d}, l, kParamNames[w + 1]);
  }
  for (Param w : {AFTER1_W, AFTER3_W}) {  // a sandwich layer's after-norms: both or none
    const std::optional<at::Tensor> given = maybe(p, l, w), first = maybe(p, l, AFTER1_W);
    const bool has = given.has_value() && given->defined();
    TORCH_CHECK_VALUE(has == (first.has_value() && first->defined()), "decoder_layers: layer ",
                      l, " has one after-norm of two");
    if (!has) continue;
    expect(*given, {d}, l, kParamNames[w]);
    const std::optional<at::Tensor> b = maybe(p, l, Param(w + 1));
    TORCH_CHECK_VALUE(!rms || !b.has_value() || !b->defined(), "decoder_layers: layer ", l,
                      "'s ", kParamNames[w + 1], " is given, but an RMSNorm has none");
    if (b.has_value() && b->defined()) expect(*b, {d}, l, kParamNames[w + 1]);
  }
}

// x (B, L, d) through every layer as an encoder's (every token attends to every real token of
// its text; ``keep`` (B, L) false at padding): the layers' tensors as decoder_layers takes them,
// without cross-attention, rotations, position biases or sliding windows (encoder_layers.cpp).
at::Tensor encoder_layers(const at::Tensor& x_in, const at::Tensor& keep_in, const Params& params,
                          at::TensorList packed, int64_t heads, int64_t width, int64_t kv_heads,
                          at::ArrayRef<double> self_scale, at::ArrayRef<double> eps,
                          at::ArrayRef<int64_t> norm_first, at::ArrayRef<int64_t> activation,
                          at::ArrayRef<int64_t> gated, at::ArrayRef<int64_t> rms_norm,
                          at::ArrayRef<double> head_eps, at::ArrayRef<double> after_eps);

}  // namespace zoo::layer
