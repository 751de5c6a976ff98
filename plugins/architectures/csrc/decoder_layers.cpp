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
// attention and the norms). What it may run is decided by the caller (native_plan.py);
// anything else decodes in Python. Each layer's tensors and settings are named fields of a
// Layer (LayerParts, layer_parts.h), and one short function runs each sublayer.
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

// What one step gives every layer: the sizes, the sources' padding (sources, source length)
// and the keys' own (rows, length), false at padding, or null.
struct StepInputs {
  Sizes z;
  int64_t groups;  // rows a source: its beams
  const bool* keep = nullptr;
  const bool* self_keep = nullptr;
  at::Tensor keep_rows, self_keep_rows;  // what the pointers read
};

// What one layer reads and writes at a step besides its parts: its key and value buffers, the
// sources' keys and values (or none), this step's rotation and bias of its scores (or none).
struct LayerIO {
  const at::Tensor &k, &v;
  const at::Tensor* cross_k;
  const at::Tensor* cross_v;
  const float* turn;
  const float* bias;
};

// q|k|v of ``h`` (rows, 1, inner + 2 kv): each head's queries and keys RMS-normed in place
// where the layer has head norms (QK-norm).
at::Tensor projected(const LayerParts& p, const at::Tensor& h, const Sizes& z) {
  const at::Tensor qkv = linear(h, p.qkv);
  if (!p.q_norm.defined()) return qkv;
  const int64_t inner = z.heads * z.width, all = inner + 2 * z.kv_heads * z.width;
  float* m = qkv.data_ptr<float>();
  for (int64_t r = 0; r < z.rows; ++r) {
    zoo::step::rms_norm(m + r * all, m + r * all, z.heads, z.width, p.q_norm.data_ptr<float>(),
                        p.head_eps);
    zoo::step::rms_norm(m + r * all + inner, m + r * all + inner, z.kv_heads, z.width,
                        p.k_norm.data_ptr<float>(), p.head_eps);
  }
  return qkv;
}

// This step's keys (rotated where the layer rotates) and values into the buffers at ``pos``.
void store(const float* qkv, const LayerIO& io, const Sizes& z) {
  const int64_t inner = z.heads * z.width, kv = z.kv_heads * z.width, all = inner + 2 * kv;
  float *kp = io.k.data_ptr<float>(), *vp = io.v.data_ptr<float>();
  for (int64_t r = 0; r < z.rows; ++r)
    for (int64_t hd = 0; hd < z.kv_heads; ++hd) {
      const int64_t at = ((r * z.kv_heads + hd) * z.length + z.pos) * z.width;
      const float* k_new = qkv + r * all + inner + hd * z.width;
      if (io.turn)
        zoo::step::rotate(k_new, kp + at, io.turn, z.width);
      else
        std::memcpy(kp + at, k_new, z.width * sizeof(float));
      std::memcpy(vp + at, qkv + r * all + inner + kv + hd * z.width, z.width * sizeof(float));
    }
}

// The queries of q|k|v, rotated into a tensor of their own where the layer rotates.
at::Tensor queries(const at::Tensor& qkv, const LayerIO& io, const Sizes& z) {
  const int64_t inner = z.heads * z.width;
  if (!io.turn) return qkv;
  const int64_t all = qkv.size(-1);
  at::Tensor turned = at::empty({z.rows, inner}, qkv.options());
  const float* q = qkv.data_ptr<float>();
  float* t = turned.data_ptr<float>();
  for (int64_t r = 0; r < z.rows; ++r)
    for (int64_t hd = 0; hd < z.heads; ++hd)
      zoo::step::rotate(q + r * all + hd * z.width, t + r * inner + hd * z.width, io.turn,
                        z.width);
  return turned;
}

// Self-attention of one step: the query of ``pos`` over the buffers' keys up to it (the last
// ``window`` where the layer slides one), and its residual sum.
at::Tensor self_attention(const LayerParts& p, const at::Tensor& x, const LayerIO& io,
                          const StepInputs& s) {
  const Sizes& z = s.z;
  const at::Tensor qkv = projected(p, sublayer_input(x, p.norm1, p), z);
  store(qkv.data_ptr<float>(), io, z);
  const at::Tensor q = queries(qkv, io, z);
  const int64_t first = p.window > 0 ? std::max<int64_t>(0, z.pos + 1 - p.window) : 0;
  TORCH_CHECK_VALUE(first == 0 || !io.bias, "decoder_layers: a layer has both a sliding "
                    "window and a position bias of its scores");
  const float *kp = io.k.data_ptr<float>(), *vp = io.v.data_ptr<float>();
  const at::Tensor out = zoo::step::attend(
      {q.data_ptr<float>(), q.size(-1), kp + first * z.width, vp + first * z.width, z.rows,
       z.heads, z.width, 1, z.pos + 1 - first, z.length, z.kv_heads,
       s.self_keep ? s.self_keep + first : nullptr, z.length, float(p.self_scale), io.bias,
       float(p.score_cap)});
  return residual(linear(out, p.self_out), x, p, p.norm1, &p.after_attention);
}

// Cross-attention: the beams of a source read its keys and values (row r: r / groups).
at::Tensor cross_attention(const LayerParts& p, const at::Tensor& x, const LayerIO& io,
                           const StepInputs& s) {
  const Sizes& z = s.z;
  const at::Tensor q = linear(sublayer_input(x, p.norm2, p), p.cross_q);
  const at::Tensor out = zoo::step::attend(
      {q.data_ptr<float>(), z.heads * z.width, io.cross_k->data_ptr<float>(),
       io.cross_v->data_ptr<float>(), z.rows, z.heads, z.width, s.groups, z.src_len, z.src_len,
       z.heads, s.keep, z.src_len, float(p.cross_scale), nullptr});
  return residual(linear(out, p.cross_out), x, p, p.norm2);
}

// One layer of the step. Its network follows the attentions' sums, or (a parallel layer)
// reads the layer's input beside them: x + attn(norm1(x)) + ffn(norm3(x)) (GPT-J, GPT-NeoX).
at::Tensor decoder_layer(const LayerParts& p, const at::Tensor& layer_in, const LayerIO& io,
                         const StepInputs& s) {
  at::Tensor x = self_attention(p, layer_in, io, s);
  if (s.z.cross) x = cross_attention(p, x, io, s);
  const at::Tensor h = sublayer_input(p.parallel ? layer_in : x, p.norm3, p);
  return residual(network(p, h), x, p, p.norm3, &p.after_network);
}

// -- the plan: what one decoding call's steps share, built once, typed ---------------------------
// A layer of the plan, given by name, part by part into its LayerParts: a new kind of layer adds
// a field there and a setter here, never a positional argument.
struct Layer : torch::CustomClassHolder {
  LayerParts parts;

  // Product ``which`` (0 q|k|v, 1 self out, 2 cross q, 3 cross out, 4 fc1, 5 fc2): its
  // weight (fp32, or int8), bias and packed weight (Linear.native_weight).
  void product(int64_t which, at::Tensor weight, std::optional<at::Tensor> bias,
               at::Tensor packed_weight) {
    Product* p = product_of(parts, which);
    p->weight = weight;
    p->bias = bias;
    p->packed = packed_weight;
  }
  // Norm ``which`` (before or after each sublayer: 0 self-attention, 1 cross-attention,
  // 2 the network): weight, bias (none for an RMSNorm) and eps.
  void norm(int64_t which, at::Tensor weight, std::optional<at::Tensor> bias, double e) {
    TORCH_CHECK_VALUE(which >= 0 && which < 3, "decoder_layers: norm ", which,
                      " is none of a layer's three");
    Norm* norms[3] = {&parts.norm1, &parts.norm2, &parts.norm3};
    *norms[which] = Norm{weight, bias, e};
  }
  // Each head's queries and keys RMS-normed by these weights (head width) and eps.
  void head_norms(at::Tensor q_weight, at::Tensor k_weight, double e) {
    parts.q_norm = q_weight;
    parts.k_norm = k_weight;
    parts.head_eps = e;
  }
  // Norms of the attention's and the network's outputs before their residual sums (a
  // sandwich layer's: Gemma 2 and 3), weights and biases (none for RMSNorms), one eps.
  void after_norms(at::Tensor attention_w, std::optional<at::Tensor> attention_b,
                   at::Tensor network_w, std::optional<at::Tensor> network_b, double e) {
    parts.after_attention = Norm{attention_w, attention_b, e};
    parts.after_network = Norm{network_w, network_b, e};
  }
  // The self-attention's scores soft-capped to (-cap, cap) (Gemma 2's 50; 0: none).
  void softcap(double cap) {
    TORCH_CHECK_VALUE(cap >= 0 && std::isfinite(cap), "decoder_layers: a soft cap of ", cap);
    parts.score_cap = cap;
  }
  // Self-attention over the ``w`` most recent keys, the query's own included (0: all).
  void sliding_window(int64_t w) {
    TORCH_CHECK_VALUE(w >= 0, "decoder_layers: a window of ", w, " keys");
    parts.window = w;
  }
  // The scales of the self-attention's and the cross-attention's scores.
  void scales(double self_scale, double cross_scale) {
    parts.self_scale = self_scale;
    parts.cross_scale = cross_scale;
  }
  // The network's activation (0 ReLU, 1 GELU, 2 tanh GELU, 3 SiLU), gated or not.
  void network(int64_t code, bool is_gated) {
    parts.activation = code;
    parts.gated = is_gated;
  }
  // Pre-norm or post-norm, LayerNorms or RMSNorms.
  void layout(bool pre, bool rms) {
    parts.pre = pre;
    parts.rms = rms;
  }
  // The attention and the network side by side on the layer's input, both added to it
  // (a parallel residual: GPT-J, GPT-NeoX, Falcon, Phi-2), rather than one after the other.
  void parallel_residual(bool on) { parts.parallel = on; }
};

void check_buffers(const at::Tensor& k, const at::Tensor& v, const at::Tensor* cross_k,
                   const at::Tensor* cross_v, int64_t l, const Sizes& z) {
  expect(k, {z.rows, z.kv_heads, z.length, z.width}, l, "self-attention key buffer");
  expect(v, {z.rows, z.kv_heads, z.length, z.width}, l, "self-attention value buffer");
  if (!z.cross) return;
  expect(*cross_k, {z.sources, z.heads, z.src_len, z.width}, l, "cross-attention keys");
  expect(*cross_v, {z.sources, z.heads, z.src_len, z.width}, l, "cross-attention values");
}

void check_x(const at::Tensor& x) {
  TORCH_CHECK_VALUE(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() &&
                        x.dim() == 3 && x.size(1) == 1 && x.size(0) > 0 && x.size(2) > 0,
                    "decoder_layers: x is a contiguous float32 CPU tensor (rows, 1, d), not ",
                    x.scalar_type(), " of shape ", x.sizes(),
                    x.is_contiguous() ? "" : " (not contiguous)");
}

// A mask given as a tensor of ``n`` entries, as bools, or undefined where none is given.
at::Tensor mask_of(const std::optional<at::Tensor>& mask, int64_t n, const char* what) {
  if (!mask.has_value() || !mask->defined()) return at::Tensor();
  TORCH_CHECK_VALUE(mask->device().is_cpu() && mask->numel() == n, "decoder_layers: ", what,
                    " is a CPU tensor of ", n, " entries, not of shape ", mask->sizes());
  return mask->to(at::kBool).contiguous();
}

// One decoding call's layers and buffers, gathered once; ``step`` runs one position through
// them. The per-step inputs (a position bias of the scores, a rotation of queries and keys, the
// keys' own padding) are set by name before the steps they change.
struct Plan : torch::CustomClassHolder {
  Heads shape;
  std::vector<c10::intrusive_ptr<Layer>> layers;  // shared by the plan's copies, never changed
  std::vector<at::Tensor> k, v, cross_k, cross_v;  // this call's buffers
  std::optional<at::Tensor> keep, self_keep;
  std::vector<at::Tensor> watched;  // the tensors the plan was made from, and their versions
  std::vector<int64_t> versions;
  c10::List<std::optional<at::Tensor>> rotations;
  c10::List<std::optional<at::Tensor>> self_bias;

  Plan(int64_t heads, int64_t width, int64_t kv_heads) : shape{heads, width, kv_heads} {}

  int64_t count() const { return int64_t(layers.size()); }

  void add(const c10::intrusive_ptr<Layer>& layer) {
    layers.push_back(layer);
    self_bias.push_back(std::nullopt);
    rotations.push_back(std::nullopt);
  }
  // This plan's layers (the same weights) for another decoding call, without its per-step
  // inputs: a model's plan is made once and each call copies it and sets its own buffers.
  c10::intrusive_ptr<Plan> copy() const {
    auto out = c10::make_intrusive<Plan>(*this);
    out->keep = out->self_keep = std::nullopt;
    out->self_bias = self_bias.copy();  // (c10::List shares its elements when copied)
    out->rotations = rotations.copy();
    for (int64_t l = 0; l < count(); ++l) {
      out->self_bias.set(l, std::nullopt);
      out->rotations.set(l, std::nullopt);
    }
    return out;
  }
  // One decoding call's buffers: each layer's keys and values, and the sources' keys and
  // values for cross-attention (one a layer, or none for a decoder-only model's).
  void buffers(std::vector<at::Tensor> keys, std::vector<at::Tensor> values,
               std::vector<at::Tensor> sources_k, std::vector<at::Tensor> sources_v) {
    const int64_t n = int64_t(sources_k.size()), layers_ = count();
    TORCH_CHECK_VALUE(int64_t(keys.size()) == layers_ && int64_t(values.size()) == layers_ &&
                          (n == 0 || n == layers_) && int64_t(sources_v.size()) == n,
                      "decoder_layers: one key and value buffer a layer for ", layers_,
                      " layers (the sources' keys and values for all or none), not ",
                      keys.size(), ", ", values.size(), ", ", n, " and ", sources_v.size());
    k = std::move(keys);
    v = std::move(values);
    cross_k = std::move(sources_k);
    cross_v = std::move(sources_v);
  }
  // The sources' padding (sources, 1, 1, source length; false at it), for cross-attention.
  void sources_padding(std::optional<at::Tensor> mask) { keep = mask; }
  // Each layer's bias of this step's self-attention scores (heads, pos + 1), or none.
  void position_biases(c10::List<std::optional<at::Tensor>> biases) { self_bias = biases; }
  // The (width, width) rotation of this step's queries and keys in every layer, or none.
  void rotate(std::optional<at::Tensor> matrix) {
    for (int64_t l = 0; l < count(); ++l) rotations.set(l, matrix);
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
  at::Tensor encode(const at::Tensor& x, const at::Tensor& keep_mask) {
    TORCH_CHECK_VALUE(cross_k.empty(), "encoder_layers: an encoder's layers have no "
                      "cross-attention");
    std::vector<const LayerParts*> parts;
    for (const auto& layer : layers) parts.push_back(&layer->parts);
    return encoder_layers(x, keep_mask, parts, shape);
  }

  // The sizes of a step of ``x`` at ``pos``, checked against the plan's heads and buffers.
  Sizes sizes(const at::Tensor& x, int64_t pos) const {
    TORCH_CHECK_VALUE(count() > 0 && !k.empty(), "decoder_layers: no layers (no buffers)");
    TORCH_CHECK_VALUE(shape.heads > 0 && shape.width > 0, "decoder_layers: heads (",
                      shape.heads, ") and width (", shape.width, ") are positive");
    TORCH_CHECK_VALUE(shape.kv_heads > 0 && shape.heads % shape.kv_heads == 0,
                      "decoder_layers: kv_heads (", shape.kv_heads, ") divides heads (",
                      shape.heads, ")");
    check_x(x);
    const bool cross = !cross_k.empty();
    TORCH_CHECK_VALUE(k[0].dim() == 4 && (!cross || cross_k[0].dim() == 4),
                      "decoder_layers: the buffers and cross keys are 4-d");
    const int64_t rows = x.size(0), length = k[0].size(2);
    const int64_t sources = cross ? cross_k[0].size(0) : rows;
    TORCH_CHECK_VALUE(sources > 0 && rows % sources == 0, "decoder_layers: ", rows,
                      " rows are not a whole number of beams for each of ", sources,
                      " sources");
    TORCH_CHECK_VALUE(pos >= 0 && pos < length, "decoder_layers: step ", pos,
                      " is outside the buffers' ", length);
    return Sizes{x.size(2), rows, shape.heads, shape.kv_heads, shape.width, length, sources,
                 cross ? cross_k[0].size(2) : 0, pos, cross};
  }

  // What every layer of this step reads besides its parts, each checked.
  StepInputs inputs(const at::Tensor& x, int64_t pos) const {
    StepInputs s{sizes(x, pos), 0};
    const Sizes& z = s.z;
    s.groups = z.rows / z.sources;
    TORCH_CHECK_VALUE(int64_t(rotations.size()) == count() && int64_t(self_bias.size()) ==
                          count(), "decoder_layers: ", rotations.size(), " rotations and ",
                      self_bias.size(), " position biases for ", count(), " layers: one a layer");
    TORCH_CHECK_VALUE(!keep.has_value() || !keep->defined() || z.cross, "decoder_layers: keep "
                      "is the sources' padding, and there is no cross-attention (self_keep is "
                      "the keys' own)");
    s.keep_rows = mask_of(keep, z.sources * z.src_len, "keep (the sources' padding)");
    s.self_keep_rows = mask_of(self_keep, z.rows * z.length, "self_keep (the keys' padding)");
    s.keep = s.keep_rows.defined() ? s.keep_rows.data_ptr<bool>() : nullptr;
    s.self_keep = s.self_keep_rows.defined() ? s.self_keep_rows.data_ptr<bool>() : nullptr;
    for (int64_t l = 0; l < count(); ++l) {
      check_parts(layers[l]->parts, l, z);
      check_buffers(k[l], v[l], z.cross ? &cross_k[l] : nullptr,
                    z.cross ? &cross_v[l] : nullptr, l, z);
      const std::optional<at::Tensor> bias = self_bias.get(l), turn = rotations.get(l);
      if (bias.has_value() && bias->defined())
        expect(*bias, {z.heads, z.pos + 1}, l, "self-attention position bias");
      if (turn.has_value() && turn->defined()) expect(*turn, {z.width, z.width}, l, "rotation");
    }
    return s;
  }

  at::Tensor step(const at::Tensor& x_in, int64_t pos) {
    const StepInputs s = inputs(x_in, pos);
    at::Tensor x = x_in;
    for (int64_t l = 0; l < count(); ++l) {
      const std::optional<at::Tensor> bias = self_bias.get(l), turn = rotations.get(l);
      const LayerIO io{k[l], v[l], s.z.cross ? &cross_k[l] : nullptr,
                       s.z.cross ? &cross_v[l] : nullptr,
                       turn.has_value() && turn->defined() ? turn->data_ptr<float>() : nullptr,
                       bias.has_value() && bias->defined() ? bias->data_ptr<float>() : nullptr};
      x = decoder_layer(layers[l]->parts, x, io, s);
    }
    return x;
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
      .def("scales", &Layer::scales)
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
