// zoo::layer::encoder_layers: an encoder's whole pass over a few texts in C++. An encoder's
// layer (Vaswani et al. 2017, section 3.1; BERT's, Devlin et al. 2019) is the decoder
// layer without its mask of later positions and without a cache: every token's query
// attends to the keys of every real token of its own text. At one short text a pass is a few
// dozen rows a product, and the Python between zoo's operators costs about as much as the
// products (zoo.embed of one sentence of all-MiniLM-L6-v2); here the layers run as the
// decoding step's do (decoder_layers.cpp), on the same parts (layer_parts.h): zoo's packed
// products (fp32 or int8), LayerNorm or RMSNorm before or after each sublayer, a ReLU, GELU or
// SiLU network, plain or gated. What it may run is decided by the caller (native_encoder.py);
// anything else runs in Python.
//
// Padding is left out (as FasterTransformer's "remove padding" and PyTorch's nested tensors
// do): the products, norms, networks and attention run over the real tokens only, packed one
// after another, each query reading the keys of its own text (packed_attention.cpp). For 32
// sentences of 5 to 30 words, 639 of the 1,056 padded tokens are real. Padding's rows of the
// output are zeros.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "layer_parts.h"

namespace zoo::layer {

namespace {

// The real tokens of a batch: their rows of (texts x length), or none where every token is
// real, and where each text's tokens begin among the real ones (texts + 1 entries).
struct Tokens {
  at::Tensor index;   // (real,) int64, or undefined: every row is real
  at::Tensor starts;  // (texts + 1,) int64
  int64_t texts, length;
  bool all() const { return !index.defined(); }
};

Tokens real_tokens(const at::Tensor& keep, int64_t texts, int64_t length) {
  const at::Tensor flat = keep.reshape({texts * length});
  const at::Tensor starts = at::zeros({texts + 1}, at::kLong);
  starts.narrow(0, 1, texts).copy_(keep.reshape({texts, length}).sum(1).cumsum(0));
  if (flat.all().item<bool>()) return {at::Tensor(), starts, texts, length};
  return {flat.nonzero().reshape({-1}), starts, texts, length};
}

// rows (real, c) of packed tokens laid out again as (texts x length, c), zeros at padding.
at::Tensor padded(const at::Tensor& rows, const Tokens& t) {
  const at::Tensor flat = rows.reshape({rows.size(0), -1});
  if (t.all()) return flat;
  return at::zeros({t.texts * t.length, flat.size(1)}, flat.options()).index_copy_(0, t.index,
                                                                                    flat);
}

// Self-attention of the packed tokens' queries, keys and values (real, 1, inner + 2 kv): each
// query attends to the keys of its own text (packed_attention.cpp); (real, 1, inner) out.
at::Tensor attend(const at::Tensor& qkv, const Tokens& t, const Heads& h, double scale) {
  const at::Tensor rows = qkv.contiguous();
  return zoo::step::attend_packed({rows.data_ptr<float>(), rows.size(-1),
                                   t.starts.data_ptr<int64_t>(), t.texts, rows.size(0), h.heads,
                                   h.kv_heads, h.width, float(scale)});
}

// One layer of the encoder's pass over ``x`` (real, 1, d): attention over every real token of
// each text, then the network, each with its residual sum.
at::Tensor encoder_layer(const LayerParts& p, at::Tensor x, const Tokens& tokens,
                         const Heads& h) {
  const at::Tensor qkv = linear(sublayer_input(x, p.norm1, p), p.qkv);
  const at::Tensor out = attend(qkv, tokens, h, p.self_scale);
  x = residual(linear(out, p.self_out), x, p, p.norm1, &p.after_attention);
  return residual(network(p, sublayer_input(x, p.norm3, p)), x, p, p.norm3, &p.after_network);
}

void check_input(const at::Tensor& x, const at::Tensor& keep, const Heads& h, size_t layers) {
  TORCH_CHECK_VALUE(layers > 0, "encoder_layers: no layers");
  TORCH_CHECK_VALUE(h.heads > 0 && h.width > 0 && h.kv_heads > 0 && h.heads % h.kv_heads == 0,
                    "encoder_layers: heads (", h.heads, ") and kv_heads (", h.kv_heads,
                    ") are positive, and kv_heads divides heads");
  TORCH_CHECK_VALUE(x.device().is_cpu() && x.scalar_type() == at::kFloat && x.is_contiguous() &&
                        x.dim() == 3 && x.size(0) > 0 && x.size(1) > 0 && x.size(2) > 0,
                    "encoder_layers: x is a contiguous float32 CPU tensor (texts, length, d), "
                    "not ", x.scalar_type(), " of shape ", x.sizes());
  TORCH_CHECK_VALUE(keep.device().is_cpu() && keep.numel() == x.size(0) * x.size(1),
                    "encoder_layers: keep is a CPU tensor of one entry a token (", x.size(0),
                    " x ", x.size(1), "), not of shape ", keep.sizes());
}

}  // namespace

at::Tensor encoder_layers(const at::Tensor& x_in, const at::Tensor& keep_in,
                          const std::vector<const LayerParts*>& layers, const Heads& h) {
  check_input(x_in, keep_in, h, layers.size());
  const int64_t texts = x_in.size(0), length = x_in.size(1), d = x_in.size(2);
  const at::Tensor keep = keep_in.to(at::kBool).contiguous();
  const Tokens tokens = real_tokens(keep, texts, length);
  // (real, 1, d): a real token a row, as the step's sublayers take them
  at::Tensor x = (tokens.all() ? x_in.reshape({texts * length, d})
                               : x_in.reshape({texts * length, d}).index_select(0, tokens.index))
                     .reshape({-1, 1, d});
  const Sizes sizes{d, x.size(0), h.heads, h.kv_heads, h.width, length, texts, 0, 0, false};
  for (size_t l = 0; l < layers.size(); ++l) {
    check_parts(*layers[l], int64_t(l), sizes);
    TORCH_CHECK_VALUE(!layers[l]->q_norm.defined(), "encoder_layers: layer ", l,
                      " norms its queries and keys; the encoder's pass does not");
    TORCH_CHECK_VALUE(!layers[l]->parallel, "encoder_layers: layer ", l, " is parallel, which "
                      "an encoder's pass does not run");
  }
  for (const LayerParts* layer : layers) x = encoder_layer(*layer, x, tokens, h);
  return padded(x, tokens).view({texts, length, d});
}

}  // namespace zoo::layer
