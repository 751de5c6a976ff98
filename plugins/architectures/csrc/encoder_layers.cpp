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
// do): the products, norms and networks run over the real tokens only, packed one after
// another, and only attention sees the texts padded to their longest, through PyTorch's
// fused scaled-dot-product attention (the kernel zoo's Python layers call), each query
// reading the real keys of its own text. For 32 sentences of 5 to 30 words, 639 of the
// 1,056 padded tokens are real. Padding's rows of the output are zeros.
#include <ATen/Functions.h>
#include <ATen/core/Tensor.h>
#include <c10/util/Exception.h>

#include "layer_parts.h"

namespace zoo::layer {

namespace {

// The real tokens of a batch: their rows of (texts x length), or none where every token is real.
struct Tokens {
  at::Tensor index;  // (real,) int64, or undefined: every row is real
  int64_t texts, length;
  bool all() const { return !index.defined(); }
};

Tokens real_tokens(const at::Tensor& keep, int64_t texts, int64_t length) {
  const at::Tensor flat = keep.reshape({texts * length});
  if (flat.all().item<bool>()) return {at::Tensor(), texts, length};
  return {flat.nonzero().reshape({-1}), texts, length};
}

// rows (real, c) of packed tokens laid out again as (texts x length, c), zeros at padding.
at::Tensor padded(const at::Tensor& rows, const Tokens& t) {
  const at::Tensor flat = rows.reshape({rows.size(0), -1});
  if (t.all()) return flat;
  return at::zeros({t.texts * t.length, flat.size(1)}, flat.options()).index_copy_(0, t.index,
                                                                                    flat);
}

// Self-attention of the packed tokens' queries, keys and values (real, 1, inner + 2 kv): each
// query attends to the real keys of its text (``mask``, (texts, 1, 1, length)), through
// at::scaled_dot_product_attention over the texts padded; (real, 1, inner) out.
at::Tensor attend(const at::Tensor& qkv, const Tokens& t, const at::Tensor& mask, int64_t heads,
                  int64_t kv_heads, int64_t width, double scale) {
  const int64_t inner = heads * width, kv = kv_heads * width;
  const at::Tensor all = padded(qkv, t).view({t.texts, t.length, inner + 2 * kv});
  auto part = [&](int64_t from, int64_t n) {  // (texts, n, length, width)
    return all.narrow(-1, from, n * width).view({t.texts, t.length, n, width}).transpose(1, 2);
  };
  at::Tensor q = part(0, heads), k = part(inner, kv_heads), v = part(inner + kv, kv_heads);
  if (kv_heads != heads) {  // grouped-query attention: each key head serves its group
    k = k.repeat_interleave(heads / kv_heads, 1);
    v = v.repeat_interleave(heads / kv_heads, 1);
  }
  const at::Tensor out = at::scaled_dot_product_attention(
      q, k, v, t.all() ? std::optional<at::Tensor>() : std::optional<at::Tensor>(mask), 0.0,
      false, scale).transpose(1, 2).reshape({t.texts * t.length, inner});
  return (t.all() ? out : out.index_select(0, t.index)).view({-1, 1, inner});
}

}  // namespace

at::Tensor encoder_layers(const at::Tensor& x_in, const at::Tensor& keep_in, const Params& params,
                          at::TensorList packed, int64_t heads, int64_t width, int64_t kv_heads,
                          at::ArrayRef<double> self_scale, at::ArrayRef<double> eps,
                          at::ArrayRef<int64_t> norm_first, at::ArrayRef<int64_t> activation,
                          at::ArrayRef<int64_t> gated, at::ArrayRef<int64_t> rms_norm,
                          at::ArrayRef<double> head_eps, at::ArrayRef<double> after_eps) {
  const int64_t layers = int64_t(self_scale.size());
  TORCH_CHECK_VALUE(layers > 0 && int64_t(params.size()) == layers * PARAMS_PER_LAYER &&
                        int64_t(packed.size()) == layers * PRODUCTS_PER_LAYER &&
                        int64_t(eps.size()) == 3 * layers &&
                        int64_t(norm_first.size()) == layers &&
                        int64_t(activation.size()) == layers &&
                        int64_t(gated.size()) == layers && int64_t(rms_norm.size()) == layers &&
                        int64_t(after_eps.size()) == layers,
                    "encoder_layers: one of each tensor and setting a layer, for ", layers,
                    " layers");
  TORCH_CHECK_VALUE(heads > 0 && width > 0 && kv_heads > 0 && heads % kv_heads == 0,
                    "encoder_layers: heads (", heads, ") and kv_heads (", kv_heads,
                    ") are positive, and kv_heads divides heads");
  TORCH_CHECK_VALUE(x_in.device().is_cpu() && x_in.scalar_type() == at::kFloat &&
                        x_in.is_contiguous() && x_in.dim() == 3 && x_in.size(0) > 0 &&
                        x_in.size(1) > 0 && x_in.size(2) > 0,
                    "encoder_layers: x is a contiguous float32 CPU tensor (texts, length, d), "
                    "not ", x_in.scalar_type(), " of shape ", x_in.sizes());
  const int64_t texts = x_in.size(0), length = x_in.size(1), d = x_in.size(2);
  TORCH_CHECK_VALUE(keep_in.device().is_cpu() && keep_in.numel() == texts * length,
                    "encoder_layers: keep is a CPU tensor of one entry a token (", texts, " x ",
                    length, "), not of shape ", keep_in.sizes());
  const at::Tensor keep = keep_in.to(at::kBool).contiguous();
  const Tokens tokens = real_tokens(keep, texts, length);
  // (real, 1, d): a real token a row, as the step's sublayers take them
  at::Tensor x = (tokens.all() ? x_in.reshape({texts * length, d})
                               : x_in.reshape({texts * length, d}).index_select(0, tokens.index))
                     .reshape({-1, 1, d});
  const Sizes sizes{d, x.size(0), heads, kv_heads, width, length, texts, 0, 0, false};
  for (int64_t l = 0; l < layers; ++l) {
    check_layer(params, packed, l, sizes, at::Tensor(), at::Tensor(), {}, {}, activation[l],
                gated[l] != 0, rms_norm[l] != 0, std::nullopt);
    const std::optional<at::Tensor> q_norm = maybe(params, l, Q_NORM_W);
    TORCH_CHECK_VALUE(!(q_norm.has_value() && q_norm->defined()), "encoder_layers: layer ", l,
                      " norms its queries and keys; the encoder's pass does not");
  }
  const at::Tensor mask = keep.view({texts, 1, 1, length});
  for (int64_t l = 0; l < layers; ++l) {
    const bool pre = norm_first[l] != 0, rms = rms_norm[l] != 0;
    at::Tensor h = pre ? norm(x, params, l, NORM1_W, eps[3 * l], rms) : x;
    const at::Tensor out = attend(linear(h, params, packed, l, QKV_W), tokens, mask, heads,
                                  kv_heads, width, self_scale[l]);
    x = residual(linear(out, params, packed, l, SELF_OUT_W), x, pre, params, l, NORM1_W,
                 eps[3 * l], rms, AFTER1_W, after_eps[l]);
    h = pre ? norm(x, params, l, NORM3_W, eps[3 * l + 2], rms) : x;
    const at::Tensor f = activate(linear(h, params, packed, l, FC1_W), activation[l],
                                  gated[l] != 0, get(params, l, FC2_W).size(1));
    x = residual(linear(f, params, packed, l, FC2_W), x, pre, params, l, NORM3_W,
                 eps[3 * l + 2], rms, AFTER3_W, after_eps[l]);
  }
  return padded(x, tokens).view({texts, length, d});
}

}  // namespace zoo::layer
