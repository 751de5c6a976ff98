// zoo::decoder_layers: one decoding step through every layer of a plain decoder,
// in C++. The static decoder (plugins/architectures/static_decoder.py) writes the
// step out in Python over the model's modules; at one sentence a step, the
// thousands of operator and module calls of that Python cost about as much as the
// products. This is the same step in C++: the paper's decoder layer (Vaswani et al.
// 2017, section 3.1), post-norm or pre-norm, self-attention over keys and values in
// preallocated buffers, cross-attention over the encoder's keys and values projected
// once, a ReLU, GELU or SiLU feed-forward network, plain or gated (Shazeer 2020: GEGLU,
// SwiGLU; its two input products joined into one), LayerNorm or RMSNorm, and a per-head bias
// of the self-attention scores given for this step (T5's relative positions, Raffel et al.
// 2020), queries and keys rotated by a matrix given for this step, one a layer (RoPE, Su et al.
// 2021; Gemma 3's local and global bases), keys
// and values of fewer heads than the queries (grouped-query attention, Ainslie et al. 2023),
// each head's queries and keys RMS-normed before the rotation where a layer has head norms
// (QK-norm, Dehghani et al. 2023: Qwen3, Gemma 3), sandwich norms after the sublayers and
// soft-capped scores (Gemma 2 and 3), self-attention over the last ``window``
// keys only where a layer has a sliding window (Mistral, Phi-3, Gemma 3's local layers),
// and no cross-attention at all (a decoder-only model's layer: cross_k empty; its second
// sublayer's norm is then norm3). Every product goes through
// zoo::packed_linear, on the weights the caller packed (Linear.native_weight in
// Python, or QuantizedLinear.native_weight: int8 weights with per-row scales); attention,
// the norms and the residual sums are plain loops (step_ops.cpp).
// Its results equal the Python step's up to fp32 rounding (another summation order in
// attention and the norms). What it may run is decided by the caller (native_plan in
// static_decoder.py); anything else decodes in Python.
#include <ATen/Functions.h>
#include <ATen/TensorOperators.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>
#include <torch/custom_class.h>
#include <torch/library.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <optional>
#include <vector>

#include "layer_parts.h"
#include "packed_linear.h"
#include "step_ops.h"

namespace {

using namespace zoo::layer;

at::Tensor decoder_layers(const at::Tensor& x_in, int64_t pos, const Params& params,
                          at::TensorList packed, at::TensorList k_buffers, at::TensorList v_buffers,
                          at::TensorList cross_k, at::TensorList cross_v,
                          const std::optional<at::Tensor>& keep_in, int64_t heads, int64_t width,
                          at::ArrayRef<double> self_scale, at::ArrayRef<double> cross_scale,
                          at::ArrayRef<double> eps, at::ArrayRef<int64_t> norm_first,
                          at::ArrayRef<int64_t> activation,
                          const c10::List<std::optional<at::Tensor>>& self_bias,
                          at::ArrayRef<int64_t> gated, at::ArrayRef<int64_t> rms_norm,
                          int64_t kv_heads,
                          const c10::List<std::optional<at::Tensor>>& rotations,
                          const std::optional<at::Tensor>& self_keep_in,
                          at::ArrayRef<double> head_eps, at::ArrayRef<int64_t> windows,
                          at::ArrayRef<double> after_eps, at::ArrayRef<double> score_cap,
                          at::ArrayRef<int64_t> parallel) {
  const int64_t layers = k_buffers.size();
  TORCH_CHECK_VALUE(layers > 0, "decoder_layers: no layers (k_buffers is empty)");
  TORCH_CHECK_VALUE(int64_t(params.size()) == layers * PARAMS_PER_LAYER,
                    "decoder_layers: params has ", params.size(), " entries, not ",
                    PARAMS_PER_LAYER, " a layer for ", layers, " layers");
  TORCH_CHECK_VALUE(int64_t(packed.size()) == layers * PRODUCTS_PER_LAYER, "decoder_layers: "
                    "packed has ", packed.size(), " weights, not ", PRODUCTS_PER_LAYER,
                    " a layer for ", layers, " layers");
  const bool cross = !cross_k.empty();
  TORCH_CHECK_VALUE(int64_t(v_buffers.size()) == layers &&
                        int64_t(cross_k.size()) == (cross ? layers : 0) &&
                        int64_t(cross_v.size()) == int64_t(cross_k.size()) &&
                        int64_t(norm_first.size()) == layers &&
                        int64_t(activation.size()) == layers &&
                        int64_t(self_bias.size()) == layers && int64_t(gated.size()) == layers &&
                        int64_t(rms_norm.size()) == layers &&
                        int64_t(eps.size()) == 3 * layers &&
                        int64_t(head_eps.size()) == layers &&
                        int64_t(windows.size()) == layers &&
                        int64_t(after_eps.size()) == layers &&
                        int64_t(score_cap.size()) == layers &&
                        int64_t(parallel.size()) == layers &&
                        int64_t(self_scale.size()) == layers &&
                        int64_t(cross_scale.size()) == layers,
                    "decoder_layers: one buffer, scale, bias and setting a layer (three eps; "
                    "cross keys and values, or none), for ",
                    layers, " layers");
  TORCH_CHECK_VALUE(heads > 0 && width > 0, "decoder_layers: heads (", heads, ") and width (",
                    width, ") are positive");
  TORCH_CHECK_VALUE(kv_heads > 0 && heads % kv_heads == 0, "decoder_layers: kv_heads (",
                    kv_heads, ") divides heads (", heads, ")");
  TORCH_CHECK_VALUE(x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat &&
                        x_in.is_contiguous() && x_in.dim() == 3 && x_in.size(1) == 1 &&
                        x_in.size(0) > 0 && x_in.size(2) > 0,
                    "decoder_layers: x is a contiguous float32 CPU tensor (rows, 1, d), not ",
                    x_in.scalar_type(), " of shape ", x_in.sizes(),
                    x_in.is_contiguous() ? "" : " (not contiguous)");
  const int64_t rows = x_in.size(0), d = x_in.size(2), inner = heads * width;
  TORCH_CHECK_VALUE(k_buffers[0].dim() == 4 && (!cross || cross_k[0].dim() == 4),
                    "decoder_layers: the buffers and cross keys are 4-d");
  const int64_t length = k_buffers[0].size(2), sources = cross ? cross_k[0].size(0) : rows;
  const int64_t src_len = cross ? cross_k[0].size(2) : 0;
  TORCH_CHECK_VALUE(sources > 0 && rows % sources == 0, "decoder_layers: ", rows,
                    " rows are not a whole number of beams for each of ", sources, " sources");
  TORCH_CHECK_VALUE(pos >= 0 && pos < length, "decoder_layers: step ", pos,
                    " is outside the buffers' ", length);
  const Sizes sizes{d, rows, heads, kv_heads, width, length, sources, src_len, pos, cross};
  for (int64_t l = 0; l < layers; ++l) {
    check_layer(params, packed, l, sizes, k_buffers[l], v_buffers[l], cross_k, cross_v,
                activation[l], gated[l] != 0, rms_norm[l] != 0, self_bias.get(l));
    TORCH_CHECK_VALUE(std::isfinite(eps[3 * l]) && std::isfinite(eps[3 * l + 1]) &&
                          std::isfinite(eps[3 * l + 2]) && eps[3 * l] >= 0 &&
                          eps[3 * l + 1] >= 0 && eps[3 * l + 2] >= 0,
                      "decoder_layers: layer ", l, "'s eps are finite and not negative");
  }
  const int64_t groups = rows / sources;
  const bool* keep = nullptr;  // (sources, source length): false where a source is padding
  at::Tensor keep_rows;
  if (keep_in.has_value() && keep_in->defined()) {
    TORCH_CHECK_VALUE(cross, "decoder_layers: keep is the sources' padding, and there is no "
                      "cross-attention (self_keep is the keys' own)");
    TORCH_CHECK_VALUE(keep_in->device().is_cpu(), "decoder_layers: keep is a CPU tensor");
    keep_rows = keep_in->to(at::kBool).contiguous();
    TORCH_CHECK_VALUE(keep_rows.numel() == sources * src_len,
                      "decoder_layers: keep has ", keep_rows.numel(), " entries, not one a "
                      "source's position (", sources, " x ", src_len, ")");
    keep = keep_rows.data_ptr<bool>();
  }
  at::Tensor self_keep;  // (rows, length): false where a row's own earlier key is padding
  if (self_keep_in.has_value() && self_keep_in->defined()) {
    TORCH_CHECK_VALUE(self_keep_in->device().is_cpu() &&
                          self_keep_in->numel() == rows * length,
                      "decoder_layers: self_keep is a CPU tensor of one entry a row's "
                      "position (", rows, " x ", length, "), not of shape ",
                      self_keep_in->sizes());
    self_keep = self_keep_in->to(at::kBool).contiguous();
  }
  // each layer's (width, width) rotation: q and k of every head times it; or none
  TORCH_CHECK_VALUE(int64_t(rotations.size()) == layers, "decoder_layers: ",
                    rotations.size(), " rotations for ", layers, " layers: one a layer");
  std::vector<const float*> turns(layers, nullptr);
  for (int64_t l = 0; l < layers; ++l) {
    const std::optional<at::Tensor> rotation = rotations.get(l);
    if (rotation.has_value() && rotation->defined()) {
      expect(*rotation, {width, width}, l, "rotation");
      turns[l] = rotation->data_ptr<float>();
    }
  }
  const int64_t kv = kv_heads * width, qkv_width = inner + 2 * kv;
  at::Tensor x = x_in;
  for (int64_t l = 0; l < layers; ++l) {
    const bool pre = norm_first[l] != 0, rms = rms_norm[l] != 0;
    TORCH_CHECK_VALUE(!parallel[l] || (pre && !cross), "decoder_layers: layer ", l, " is "
                      "parallel, and only a pre-norm layer without cross-attention can be");
    const at::Tensor layer_in = x;  // a parallel layer's network reads it too
    const float* turn = turns[l];
    const std::optional<at::Tensor> bias = self_bias.get(l);
    const at::Tensor &kb = k_buffers[l], &vb = v_buffers[l];
    // self-attention: q, k and v from one product; k and v into the buffers at pos
    at::Tensor h = pre ? norm(x, params, l, NORM1_W, eps[3 * l], rms) : x;
    // (rows, 1, inner + 2 kv): the queries, then the keys and values of kv_heads
    const at::Tensor qkv = linear(h, params, packed, l, QKV_W);
    const float* qkv_p = qkv.data_ptr<float>();
    const std::optional<at::Tensor> q_norm = maybe(params, l, Q_NORM_W);
    if (q_norm.has_value() && q_norm->defined()) {  // each head's q and k normed, in place
      const at::Tensor k_norm = get(params, l, K_NORM_W);
      expect(*q_norm, {width}, l, "query norm weight");
      expect(k_norm, {width}, l, "key norm weight");
      float* m = qkv.data_ptr<float>();
      for (int64_t r = 0; r < rows; ++r) {
        zoo::step::rms_norm(m + r * qkv_width, m + r * qkv_width, heads, width,
                            q_norm->data_ptr<float>(), head_eps[l]);
        zoo::step::rms_norm(m + r * qkv_width + inner, m + r * qkv_width + inner, kv_heads,
                            width, k_norm.data_ptr<float>(), head_eps[l]);
      }
    }
    float *kp = kb.data_ptr<float>(), *vp = vb.data_ptr<float>();
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t hd = 0; hd < kv_heads; ++hd) {
        const int64_t at = ((r * kv_heads + hd) * length + pos) * width;
        const float* k_new = qkv_p + r * qkv_width + inner + hd * width;
        if (turn)
          zoo::step::rotate(k_new, kp + at, turn, width);
        else
          std::memcpy(kp + at, k_new, width * sizeof(float));
        std::memcpy(vp + at, qkv_p + r * qkv_width + inner + kv + hd * width,
                    width * sizeof(float));
      }
    const float* q_p = qkv_p;
    int64_t q_stride = qkv_width;
    at::Tensor turned;
    if (turn) {  // the queries rotated into a tensor of their own
      turned = at::empty({rows, inner}, qkv.options());
      float* t = turned.data_ptr<float>();
      for (int64_t r = 0; r < rows; ++r)
        for (int64_t hd = 0; hd < heads; ++hd)
          zoo::step::rotate(qkv_p + r * qkv_width + hd * width, t + r * inner + hd * width, turn,
                            width);
      q_p = t;
      q_stride = inner;
    }
    // a sliding window: the keys from ``first`` on (the buffers' views start there)
    const int64_t first = windows[l] > 0 ? std::max<int64_t>(0, pos + 1 - windows[l]) : 0;
    const bool biased = bias.has_value() && bias->defined();
    TORCH_CHECK_VALUE(first == 0 || !biased, "decoder_layers: layer ", l, " has both a "
                      "sliding window and a position bias of its scores");
    at::Tensor out = zoo::step::attend(
        {q_p, q_stride, kp + first * width, vp + first * width, rows, heads, width, 1,
         pos + 1 - first, length, kv_heads,
         self_keep.defined() ? self_keep.data_ptr<bool>() + first : nullptr, length,
         float(self_scale[l]), biased ? bias->data_ptr<float>() : nullptr,
         float(score_cap[l])});
    x = residual(linear(out, params, packed, l, SELF_OUT_W), x, pre, params, l, NORM1_W,
                 eps[3 * l], rms, AFTER1_W, after_eps[l]);
    if (cross) {  // cross-attention: the beams of a source read its keys (row r: r / groups)
      h = pre ? norm(x, params, l, NORM2_W, eps[3 * l + 1], rms) : x;
      const at::Tensor q = linear(h, params, packed, l, CROSS_Q_W);
      out = zoo::step::attend({q.data_ptr<float>(), inner, cross_k[l].data_ptr<float>(),
                               cross_v[l].data_ptr<float>(), rows, heads, width, groups,
                               src_len, src_len, heads, keep, src_len, float(cross_scale[l]),
                               nullptr});
      x = residual(linear(out, params, packed, l, CROSS_OUT_W), x, pre, params, l, NORM2_W,
                   eps[3 * l + 1], rms);
    }
    // feed-forward network: after the attention's sum, or (parallel) beside it, from the
    // layer's input: x + attn(norm1(x)) + ffn(norm3(x)) (GPT-J, GPT-NeoX)
    h = pre ? norm(parallel[l] ? layer_in : x, params, l, NORM3_W, eps[3 * l + 2], rms) : x;
    const at::Tensor f = activate(linear(h, params, packed, l, FC1_W), activation[l],
                                  gated[l] != 0, get(params, l, FC2_W).size(1));
    x = residual(linear(f, params, packed, l, FC2_W), x, pre, params, l, NORM3_W,
                 eps[3 * l + 2], rms, AFTER3_W, after_eps[l]);
  }
  return x;
}

// -- the plan: what one decoding call's steps share, built once, typed ---------------------------
// A layer of the plan, given by name, part by part: a new kind of layer adds a setter here and
// a field to the step, never a positional argument to an op.
struct Layer : torch::CustomClassHolder {
  std::vector<std::optional<at::Tensor>> params = std::vector<std::optional<at::Tensor>>(
      PARAMS_PER_LAYER);
  std::vector<at::Tensor> packed = std::vector<at::Tensor>(PRODUCTS_PER_LAYER, at::empty({0}));
  at::Tensor k, v;
  std::optional<at::Tensor> cross_k, cross_v;
  double self_scale = 1.0, cross_scale = 1.0, head_eps = 0.0, after_eps = 0.0, score_cap = 0.0;
  double eps[3] = {0.0, 0.0, 0.0};
  int64_t norm_first = 0, activation = 0, gated = 0, rms_norm = 0, window = 0, parallel = 0;

  // Product ``which`` (0 q|k|v, 1 self out, 2 cross q, 3 cross out, 4 fc1, 5 fc2): its
  // weight (fp32, or int8), bias and packed weight (Linear.native_weight).
  void product(int64_t which, at::Tensor weight, std::optional<at::Tensor> bias,
               at::Tensor packed_weight) {
    TORCH_CHECK_VALUE(which >= 0 && which < PRODUCTS_PER_LAYER, "decoder_layers: product ",
                      which, " is none of the ", PRODUCTS_PER_LAYER, " of a layer");
    params[2 * which] = weight;
    params[2 * which + 1] = bias;
    packed[which] = packed_weight;
  }
  // Norm ``which`` (before or after each sublayer: 0 self-attention, 1 cross-attention,
  // 2 the network): weight, bias (none for an RMSNorm) and eps.
  void norm(int64_t which, at::Tensor weight, std::optional<at::Tensor> bias, double e) {
    TORCH_CHECK_VALUE(which >= 0 && which < 3, "decoder_layers: norm ", which,
                      " is none of a layer's three");
    params[NORM1_W + 2 * which] = weight;
    params[NORM1_W + 2 * which + 1] = bias;
    eps[which] = e;
  }
  // Each head's queries and keys RMS-normed by these weights (head width) and eps.
  void head_norms(at::Tensor q_weight, at::Tensor k_weight, double e) {
    params[Q_NORM_W] = q_weight;
    params[K_NORM_W] = k_weight;
    head_eps = e;
  }
  // Norms of the attention's and the network's outputs before their residual sums (a
  // sandwich layer's: Gemma 2 and 3), weights and biases (none for RMSNorms), one eps.
  void after_norms(at::Tensor attention_w, std::optional<at::Tensor> attention_b,
                   at::Tensor network_w, std::optional<at::Tensor> network_b, double e) {
    params[AFTER1_W] = attention_w;
    params[AFTER1_B] = attention_b;
    params[AFTER3_W] = network_w;
    params[AFTER3_B] = network_b;
    after_eps = e;
  }
  // The self-attention's scores soft-capped to (-cap, cap) (Gemma 2's 50; 0: none).
  void softcap(double cap) {
    TORCH_CHECK_VALUE(cap >= 0 && std::isfinite(cap), "decoder_layers: a soft cap of ", cap);
    score_cap = cap;
  }
  // Self-attention over the ``w`` most recent keys, the query's own included (0: all).
  void sliding_window(int64_t w) {
    TORCH_CHECK_VALUE(w >= 0, "decoder_layers: a window of ", w, " keys");
    window = w;
  }
  // Self-attention: the buffers its keys and values go into, and its scale.
  void self_attention(at::Tensor keys, at::Tensor values, double scale) {
    k = keys;
    v = values;
    self_scale = scale;
  }
  // Cross-attention: the sources' keys and values, projected once, and its scale.
  void cross_attention(at::Tensor keys, at::Tensor values, double scale) {
    cross_k = keys;
    cross_v = values;
    cross_scale = scale;
  }
  // The network's activation (0 ReLU, 1 GELU, 2 tanh GELU, 3 SiLU), gated or not.
  void network(int64_t code, bool is_gated) {
    activation = code;
    gated = is_gated;
  }
  // Pre-norm or post-norm, LayerNorms or RMSNorms.
  void layout(bool pre, bool rms) {
    norm_first = pre;
    rms_norm = rms;
  }
  // The attention and the network side by side on the layer's input, both added to it
  // (a parallel residual: GPT-J, GPT-NeoX, Falcon, Phi-2), rather than one after the other.
  void parallel_residual(bool on) { parallel = on; }
};

// One decoding call's layers and buffers, gathered once; ``step`` runs one position through
// them. The per-step inputs (a position bias of the scores, a rotation of queries and keys, the
// keys' own padding) are set by name before the steps they change.
struct Plan : torch::CustomClassHolder {
  int64_t heads, width, kv_heads;
  Params params;
  std::vector<at::Tensor> packed, k, v, cross_k, cross_v;
  std::vector<double> self_scale, cross_scale, eps, head_eps, after_eps, score_cap;
  std::vector<int64_t> norm_first, activation, gated, rms_norm, windows, parallel;
  int64_t layers = 0, crossed = 0;
  std::optional<at::Tensor> keep, self_keep;
  std::vector<at::Tensor> watched;  // the tensors the plan was made from, and their versions
  std::vector<int64_t> versions;
  c10::List<std::optional<at::Tensor>> rotations;
  c10::List<std::optional<at::Tensor>> self_bias;

  Plan(int64_t heads_, int64_t width_, int64_t kv_heads_)
      : heads(heads_), width(width_), kv_heads(kv_heads_) {}

  void add(const c10::intrusive_ptr<Layer>& layer) {
    for (const auto& t : layer->params) params.push_back(t);
    packed.insert(packed.end(), layer->packed.begin(), layer->packed.end());
    k.push_back(layer->k);
    v.push_back(layer->v);
    if (layer->cross_k.has_value() && layer->cross_v.has_value()) {
      cross_k.push_back(*layer->cross_k);
      cross_v.push_back(*layer->cross_v);
      ++crossed;
    }
    self_scale.push_back(layer->self_scale);
    cross_scale.push_back(layer->cross_scale);
    head_eps.push_back(layer->head_eps);
    windows.push_back(layer->window);
    after_eps.push_back(layer->after_eps);
    score_cap.push_back(layer->score_cap);
    eps.insert(eps.end(), layer->eps, layer->eps + 3);
    norm_first.push_back(layer->norm_first);
    activation.push_back(layer->activation);
    gated.push_back(layer->gated);
    rms_norm.push_back(layer->rms_norm);
    parallel.push_back(layer->parallel);
    self_bias.push_back(std::nullopt);
    rotations.push_back(std::nullopt);
    ++layers;
  }
  // This plan's layers (the same weights) for another decoding call, without its per-step
  // inputs: a model's plan is made once and each call copies it and sets its own buffers.
  c10::intrusive_ptr<Plan> copy() const {
    auto out = c10::make_intrusive<Plan>(*this);
    out->keep = out->self_keep = std::nullopt;
    out->self_bias = self_bias.copy();  // (c10::List shares its elements when copied)
    out->rotations = rotations.copy();
    for (int64_t l = 0; l < layers; ++l) {
      out->self_bias.set(l, std::nullopt);
      out->rotations.set(l, std::nullopt);
    }
    return out;
  }
  // One decoding call's buffers: each layer's keys and values, and the sources' keys and
  // values for cross-attention (one a layer, or none for a decoder-only model's).
  void buffers(std::vector<at::Tensor> keys, std::vector<at::Tensor> values,
               std::vector<at::Tensor> sources_k, std::vector<at::Tensor> sources_v) {
    const int64_t n = int64_t(sources_k.size());
    TORCH_CHECK_VALUE(int64_t(keys.size()) == layers && int64_t(values.size()) == layers &&
                          (n == 0 || n == layers) && int64_t(sources_v.size()) == n,
                      "decoder_layers: one key and value buffer a layer for ", layers,
                      " layers (the sources' keys and values for all or none), not ",
                      keys.size(), ", ", values.size(), ", ", n, " and ", sources_v.size());
    k = std::move(keys);
    v = std::move(values);
    cross_k = std::move(sources_k);
    cross_v = std::move(sources_v);
    crossed = n;
  }
  // The sources' padding (sources, 1, 1, source length; false at it), for cross-attention.
  void sources_padding(std::optional<at::Tensor> mask) { keep = mask; }
  // Each layer's bias of this step's self-attention scores (heads, pos + 1), or none.
  void position_biases(c10::List<std::optional<at::Tensor>> biases) { self_bias = biases; }
  // The (width, width) rotation of this step's queries and keys in every layer, or none.
  void rotate(std::optional<at::Tensor> matrix) {
    for (int64_t l = 0; l < layers; ++l) rotations.set(l, matrix);
  }
  // Each layer's rotation of this step (Gemma 3's local and global layers rotate by their
  // own bases), or none for a layer.
  void rotate_layers(c10::List<std::optional<at::Tensor>> matrices) { rotations = matrices; }
  // (rows, buffer length): false where a row's own earlier key is padding, or none.
  void keys_padding(std::optional<at::Tensor> mask) { self_keep = mask; }

  // The tensors the plan was made from (every weight, bias and scale of its layers): changed()
  // then says whether torch counted a change to one since (``w.mul_(3)`` between two steps),
  // in one call where reading a hundred tensors' versions from Python took 50 microseconds.
  void watch(std::vector<at::Tensor> sources) {
    versions.clear();
    for (const at::Tensor& t : sources) versions.push_back(t._version());
    watched = std::move(sources);
  }
  bool changed() const {
    for (size_t i = 0; i < watched.size(); ++i)
      if (watched[i]._version() != versions[i]) return true;
    return false;
  }
  // A beam search's choice: row r of every key and value buffer becomes the row index[r] was,
  // over the first ``used`` positions; only the rows that change are copied, every source row
  // read before any is written (a row may be both).
  void reorder(const at::Tensor& index_in, int64_t used) {
    const at::Tensor index = index_in.to(at::kLong).contiguous();
    const int64_t* ix = index.data_ptr<int64_t>();
    std::vector<int64_t> moved;
    for (int64_t r = 0; r < index.numel(); ++r)
      if (ix[r] != r) moved.push_back(r);
    if (moved.empty() || used <= 0) return;
    for (const std::vector<at::Tensor>* buffers : {&k, &v})
      for (const at::Tensor& buf : *buffers) reorder_buffer(buf, ix, index.numel(), moved, used);
  }
  static void reorder_buffer(const at::Tensor& buf, const int64_t* ix, int64_t n,
                             const std::vector<int64_t>& moved, int64_t used) {
    TORCH_CHECK_VALUE(buf.dim() == 4 && buf.is_contiguous() && buf.size(0) == n &&
                          used <= buf.size(2),
                      "decoder_layers: reorder of ", n, " rows over ", used, " positions, "
                      "and a buffer of shape ", buf.sizes());
    const int64_t heads = buf.size(1), span = used * buf.size(3) * buf.element_size();
    const int64_t head_bytes = buf.size(2) * buf.size(3) * buf.element_size();
    for (int64_t r : moved)
      TORCH_CHECK_VALUE(ix[r] >= 0 && ix[r] < n, "decoder_layers: reorder to row ", ix[r],
                        " of ", n);
    auto* base = static_cast<char*>(buf.data_ptr());
    std::vector<char> copies(moved.size() * heads * span);
    for (size_t i = 0; i < moved.size(); ++i)
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(copies.data() + (i * heads + h) * span,
                    base + (ix[moved[i]] * heads + h) * head_bytes, span);
    for (size_t i = 0; i < moved.size(); ++i)
      for (int64_t h = 0; h < heads; ++h)
        std::memcpy(base + (moved[i] * heads + h) * head_bytes,
                    copies.data() + (i * heads + h) * span, span);
  }

  // An encoder's pass over x (texts, length, d) through the layers, every token attending to
  // every real token of its text (``keep``, (texts, length): false at padding); the layers'
  // buffers are not read.
  at::Tensor encode(const at::Tensor& x, const at::Tensor& keep) {
    TORCH_CHECK_VALUE(crossed == 0, "encoder_layers: an encoder's layers have no "
                      "cross-attention");
    for (int64_t l = 0; l < layers; ++l)
      TORCH_CHECK_VALUE(!parallel[l], "encoder_layers: layer ", l, " is parallel, which an "
                        "encoder's pass does not run");
    return encoder_layers(x, keep, params, packed, heads, width, kv_heads, self_scale, eps,
                          norm_first, activation, gated, rms_norm, head_eps, after_eps);
  }

  at::Tensor step(const at::Tensor& x, int64_t pos) {
    TORCH_CHECK_VALUE(crossed == 0 || crossed == layers, "decoder_layers: ", crossed, " of ",
                      layers, " layers have cross-attention: all or none");
    return decoder_layers(x, pos, params, packed, k, v, cross_k, cross_v, keep, heads, width,
                          self_scale, cross_scale, eps, norm_first, activation, self_bias, gated,
                          rms_norm, kv_heads, rotations, self_keep, head_eps, windows,
                          after_eps, score_cap, parallel);
  }
};

}  // namespace

// This plugin's own namespace (zoo's core registers torch.ops.zoo.*): the plan's classes,
// torch.classes.zoo_decoder.Layer and .Plan.
TORCH_LIBRARY(zoo_decoder, m) {
  m.class_<Layer>("Layer")
      .def(torch::init<>())
      .def("product", &Layer::product)
      .def("norm", &Layer::norm)
      .def("head_norms", &Layer::head_norms)
      .def("sliding_window", &Layer::sliding_window)
      .def("after_norms", &Layer::after_norms)
      .def("softcap", &Layer::softcap)
      .def("self_attention", &Layer::self_attention)
      .def("cross_attention", &Layer::cross_attention)
      .def("network", &Layer::network)
      .def("layout", &Layer::layout)
      .def("parallel_residual", &Layer::parallel_residual);
  m.class_<Plan>("Plan")
      .def(torch::init<int64_t, int64_t, int64_t>())
      .def("add", &Plan::add)
      .def("copy", &Plan::copy)
      .def("buffers", &Plan::buffers)
      .def("sources_padding", &Plan::sources_padding)
      .def("position_biases", &Plan::position_biases)
      .def("rotate", &Plan::rotate)
      .def("rotate_layers", &Plan::rotate_layers)
      .def("keys_padding", &Plan::keys_padding)
      .def("watch", &Plan::watch)
      .def("changed", &Plan::changed)
      .def("reorder", &Plan::reorder)
      .def("step", &Plan::step)
      .def("encode", &Plan::encode);
}
