// zoo::decoder_layers: one decoding step through every layer of a plain decoder,
// in C++. The static decoder (plugins/architectures/static_decoder.py) writes the
// step out in Python over the model's modules; at one sentence a step, the
// thousands of operator and module calls of that Python cost about as much as the
// products. This is the same step in C++: the paper's decoder layer (Vaswani et al.
// 2017, section 3.1), post-norm or pre-norm, self-attention over keys and values in
// preallocated buffers, cross-attention over the encoder's keys and values projected
// once, a ReLU or GELU feed-forward network, LayerNorm. Every product goes through
// zoo::packed_linear, on the weights the caller packed (Linear.native_weight in
// Python); attention, the norms and the residual sums are plain loops (step_ops.cpp).
// Its results equal the Python step's up to fp32 rounding (another summation order in
// attention and the norms). What it may run is decided by the caller (native_plan in
// static_decoder.py); anything else decodes in Python.
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/library.h>

#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "packed_linear.h"
#include "step_ops.h"

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

const float* data_or_null(const std::optional<at::Tensor>& t) {
  return t.has_value() && t->defined() ? t->data_ptr<float>() : nullptr;
}

// LayerNorm of x's rows by the norm ``w`` of ``layer``, into a new tensor.
at::Tensor norm(const at::Tensor& x, const Params& p, int64_t layer, Param w, double eps) {
  const at::Tensor weight = get(p, layer, w);
  at::Tensor out = at::empty_like(x);
  const int64_t d = x.size(-1);
  zoo::step::layer_norm(x.data_ptr<float>(), out.data_ptr<float>(), x.numel() / d, d,
                        weight.data_ptr<float>(), data_or_null(maybe(p, layer, Param(w + 1))),
                        eps);
  return out;
}

// x + a after a sublayer: written into a (a new tensor of the step), then normed
// after (post-norm) or not (pre-norm: the next sublayer norms its input itself).
at::Tensor residual(at::Tensor a, const at::Tensor& x, bool pre, const Params& p, int64_t layer,
                    Param w, double eps) {
  zoo::step::add(a.data_ptr<float>(), x.data_ptr<float>(), a.numel());
  return pre ? a : norm(a, p, layer, w, eps);
}

at::Tensor decoder_layers(const at::Tensor& x_in, int64_t pos, const Params& params,
                          at::TensorList packed, at::TensorList k_buffers, at::TensorList v_buffers,
                          at::TensorList cross_k, at::TensorList cross_v,
                          const std::optional<at::Tensor>& keep_in, int64_t heads, int64_t width,
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
  const bool* keep = nullptr;  // (sources, source length): false where a source is padding
  at::Tensor keep_rows;
  if (keep_in.has_value()) {
    keep_rows = keep_in->to(at::kBool).contiguous();
    TORCH_CHECK(keep_rows.numel() == sources * cross_k[0].size(2),
                "decoder_layers: keep has ", keep_rows.numel(), " entries, not one a source's "
                "position (", sources, " x ", cross_k[0].size(2), ")");
    keep = keep_rows.data_ptr<bool>();
  }
  TORCH_CHECK(x_in.is_contiguous() && x_in.scalar_type() == at::kFloat,
              "decoder_layers: a contiguous float32 x");
  at::Tensor x = x_in;
  for (int64_t l = 0; l < layers; ++l) {
    const bool pre = norm_first[l] != 0;
    const at::Tensor &kb = k_buffers[l], &vb = v_buffers[l];
    TORCH_CHECK(kb.is_contiguous() && vb.is_contiguous() && cross_k[l].is_contiguous() &&
                    cross_v[l].is_contiguous(),
                "decoder_layers: contiguous buffers and cross keys and values");
    // self-attention: q, k and v from one product; k and v into the buffers at pos
    at::Tensor h = pre ? norm(x, params, l, NORM1_W, eps[3 * l]) : x;
    const at::Tensor qkv = linear(h, params, packed, l, QKV_W);  // (rows, 1, 3 x inner)
    const float* qkv_p = qkv.data_ptr<float>();
    const int64_t length = kb.size(2);
    float *kp = kb.data_ptr<float>(), *vp = vb.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t hd = 0; hd < heads; ++hd) {
        const int64_t at = ((r * heads + hd) * length + pos) * width;
        std::memcpy(kp + at, qkv_p + r * 3 * inner + inner + hd * width, width * sizeof(float));
        std::memcpy(vp + at, qkv_p + r * 3 * inner + 2 * inner + hd * width,
                    width * sizeof(float));
      }
    at::Tensor out = zoo::step::attend({qkv_p, 3 * inner, kp, vp, rows, heads, width, 1, pos + 1,
                                        length, nullptr, float(self_scale[l])});
    x = residual(linear(out, params, packed, l, SELF_OUT_W), x, pre, params, l, NORM1_W,
                 eps[3 * l]);
    // cross-attention: the beams of a source read its keys (row r: source r / groups)
    h = pre ? norm(x, params, l, NORM2_W, eps[3 * l + 1]) : x;
    const at::Tensor q = linear(h, params, packed, l, CROSS_Q_W);
    const int64_t src_len = cross_k[l].size(2);
    out = zoo::step::attend({q.data_ptr<float>(), inner, cross_k[l].data_ptr<float>(),
                             cross_v[l].data_ptr<float>(), rows, heads, width, groups, src_len,
                             src_len, keep, float(cross_scale[l])});
    x = residual(linear(out, params, packed, l, CROSS_OUT_W), x, pre, params, l, NORM2_W,
                 eps[3 * l + 1]);
    // feed-forward network
    h = pre ? norm(x, params, l, NORM3_W, eps[3 * l + 2]) : x;
    at::Tensor f = linear(h, params, packed, l, FC1_W);
    if (activation[l] == 0)
      at::relu_(f);
    else
      at::gelu_(f, activation[l] == 2 ? "tanh" : "none");
    x = residual(linear(f, params, packed, l, FC2_W), x, pre, params, l, NORM3_W,
                 eps[3 * l + 2]);
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
