// zoo::decoder_layers: one decoding step through every layer of a plain decoder,
// in C++. The static decoder (plugins/architectures/static_decoder.py) writes the
// step out in Python over the model's modules; at one sentence a step, the
// thousands of operator and module calls of that Python cost about as much as the
// products. This is the same step, operator for operator: the paper's decoder
// layer (Vaswani et al. 2017, section 3.1), post-norm or pre-norm, self-attention
// over keys and values in preallocated buffers, cross-attention over the encoder's
// keys and values projected once, a ReLU or GELU feed-forward network, LayerNorm;
// every product goes through zoo::packed_linear, on the weights the caller packed
// (Linear.kernel_weight in Python). What it may run is decided by the caller (plain_native_step in
// static_decoder.py); anything else decodes in Python.
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <optional>
#include <vector>

#include "packed_linear.h"

namespace {

// The tensors of one layer, in the order the caller lists them.
enum Param {
  QKV_W, QKV_B, SELF_OUT_W, SELF_OUT_B, CROSS_Q_W, CROSS_Q_B, CROSS_OUT_W, CROSS_OUT_B,
  FC1_W, FC1_B, FC2_W, FC2_B, NORM1_W, NORM1_B, NORM2_W, NORM2_B, NORM3_W, NORM3_B,
  PARAMS_PER_LAYER
};

using Params = c10::List<std::optional<at::Tensor>>;

// The packed weights of a layer's six products, in the order of Param's weights.
constexpr int64_t PRODUCTS_PER_LAYER = 6;

at::Tensor get(const Params& p, int64_t layer, Param which) {
  std::optional<at::Tensor> t = p.get(layer * PARAMS_PER_LAYER + which);
  TORCH_CHECK(t.has_value(), "decoder_layers: layer ", layer, " lacks tensor ", int(which));
  return *t;
}

std::optional<at::Tensor> maybe(const Params& p, int64_t layer, Param which) {
  return p.get(layer * PARAMS_PER_LAYER + which);
}

at::Tensor linear(const at::Tensor& x, const Params& p, at::TensorList packed, int64_t layer,
                  Param w) {
  return zoo::packed_linear(x, packed[layer * PRODUCTS_PER_LAYER + w / 2],
                            maybe(p, layer, Param(w + 1)), get(p, layer, w).size(0));
}

at::Tensor norm(const at::Tensor& x, const Params& p, int64_t layer, Param w, double eps) {
  const at::Tensor weight = get(p, layer, w);
  return std::get<0>(
      at::native_layer_norm(x, {weight.size(0)}, weight, maybe(p, layer, Param(w + 1)), eps));
}

// softmax(scale q k^T, -inf where ``masked``) v over (batch, L, width) tensors, as
// zoo's eager kernel computes it; ``masked`` (if any) is broadcast over the scores
// viewed as ``masked_shape``.
// ``scale`` is a 0-dim float32 tensor: multiplying by a C++ double would wrap it and
// cast it at every call (as costly as the product at one row).
at::Tensor attend(const at::Tensor& q, const at::Tensor& k, const at::Tensor& v,
                  const at::Tensor& scale, const std::optional<at::Tensor>& masked = std::nullopt,
                  at::IntArrayRef masked_shape = {}) {
  at::Tensor scores = at::bmm(q, k.transpose(1, 2)).mul_(scale);
  if (masked.has_value()) scores.view(masked_shape).masked_fill_(*masked, -INFINITY);
  return at::bmm(at::_softmax(scores, -1, false), v);
}

at::Tensor decoder_layers(const at::Tensor& x_in, int64_t pos, const Params& params,
                          at::TensorList packed, at::TensorList k_buffers, at::TensorList v_buffers,
                          at::TensorList cross_k, at::TensorList cross_v,
                          const std::optional<at::Tensor>& keep, int64_t heads, int64_t width,
                          at::ArrayRef<double> self_scale, at::ArrayRef<double> cross_scale,
                          at::ArrayRef<double> eps, at::ArrayRef<int64_t> norm_first,
                          at::ArrayRef<int64_t> activation) {
  const int64_t layers = k_buffers.size();
  TORCH_CHECK(int64_t(params.size()) == layers * PARAMS_PER_LAYER,
              "decoder_layers: ", PARAMS_PER_LAYER, " tensors a layer");
  TORCH_CHECK(int64_t(packed.size()) == layers * PRODUCTS_PER_LAYER, "decoder_layers: ",
              PRODUCTS_PER_LAYER, " packed weights a layer");
  TORCH_CHECK(int64_t(v_buffers.size()) == layers && int64_t(cross_k.size()) == layers &&
                  int64_t(cross_v.size()) == layers && int64_t(norm_first.size()) == layers &&
                  int64_t(activation.size()) == layers && int64_t(eps.size()) == 3 * layers &&
                  int64_t(self_scale.size()) == layers && int64_t(cross_scale.size()) == layers,
              "decoder_layers: one buffer, scale and setting a layer (three eps)");
  TORCH_CHECK(pos >= 0 && pos < k_buffers[0].size(2), "decoder_layers: step ", pos,
              " is outside the buffers' ", k_buffers[0].size(2));
  const int64_t rows = x_in.size(0), inner = heads * width;
  const int64_t sources = cross_k[0].size(0), groups = rows / sources;
  std::optional<at::Tensor> masked;  // True where a source is padding
  if (keep.has_value()) masked = keep->logical_not();
  std::vector<at::Tensor> self_scales, cross_scales;
  for (int64_t l = 0; l < layers; ++l) {
    self_scales.push_back(at::scalar_tensor(self_scale[l], x_in.options()));
    cross_scales.push_back(at::scalar_tensor(cross_scale[l], x_in.options()));
  }
  at::Tensor x = x_in;
  for (int64_t l = 0; l < layers; ++l) {
    const bool pre = norm_first[l] != 0;
    // self-attention: q, k and v from one product; k and v into the buffers at pos
    at::Tensor h = pre ? norm(x, params, l, NORM1_W, eps[3 * l]) : x;
    at::Tensor qkv = linear(h, params, packed, l, QKV_W).view({rows, 3, heads, width});
    k_buffers[l].select(2, pos).copy_(qkv.select(1, 1));
    v_buffers[l].select(2, pos).copy_(qkv.select(1, 2));
    const int64_t length = k_buffers[l].size(2);
    at::Tensor out = attend(qkv.select(1, 0).reshape({rows * heads, 1, width}),
                            k_buffers[l].view({rows * heads, length, width}).narrow(1, 0, pos + 1),
                            v_buffers[l].view({rows * heads, length, width}).narrow(1, 0, pos + 1),
                            self_scales[l]);
    at::Tensor a = linear(out.view({rows, 1, inner}), params, packed, l, SELF_OUT_W);
    x = pre ? a.add_(x) : norm(a.add_(x), params, l, NORM1_W, eps[3 * l]);
    // cross-attention: a source's beams attend together as one longer query sequence
    h = pre ? norm(x, params, l, NORM2_W, eps[3 * l + 1]) : x;
    at::Tensor q = linear(h, params, packed, l, CROSS_Q_W).view({sources, groups, heads, width})
                       .transpose(1, 2).reshape({sources * heads, groups, width});
    const int64_t src_len = cross_k[l].size(2);
    out = attend(q, cross_k[l].view({sources * heads, src_len, width}),
                 cross_v[l].view({sources * heads, src_len, width}), cross_scales[l], masked,
                 {sources, heads, groups, src_len});
    a = linear(out.view({sources, heads, groups, width}).transpose(1, 2).reshape({rows, 1, inner}),
               params, packed, l, CROSS_OUT_W);
    x = pre ? a.add_(x) : norm(a.add_(x), params, l, NORM2_W, eps[3 * l + 1]);
    // feed-forward network
    h = pre ? norm(x, params, l, NORM3_W, eps[3 * l + 2]) : x;
    at::Tensor f = linear(h, params, packed, l, FC1_W);
    if (activation[l] == 0)
      at::relu_(f);
    else
      at::gelu_(f, activation[l] == 2 ? "tanh" : "none");
    a = linear(f, params, packed, l, FC2_W);
    x = pre ? a.add_(x) : norm(a.add_(x), params, l, NORM3_W, eps[3 * l + 2]);
  }
  return x;
}

}  // namespace

TORCH_LIBRARY_FRAGMENT(zoo, m) {
  m.def("decoder_layers(Tensor x, int pos, Tensor?[] params, Tensor[] packed, "
        "Tensor(a!)[] k_buffers, "
        "Tensor(b!)[] v_buffers, Tensor[] cross_k, Tensor[] cross_v, Tensor? keep, int heads, "
        "int width, "
        "float[] self_scale, float[] cross_scale, float[] eps, int[] norm_first, "
        "int[] activation) -> Tensor");
}

TORCH_LIBRARY_IMPL(zoo, CPU, m) { m.impl("decoder_layers", decoder_layers); }
