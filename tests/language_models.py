"""Decoder-only folders made by transformers from the Hub's published configs at small
widths: gpt2, TinyLlama-1.1B, Llama-3.2-1B (GQA, llama3 RoPE scaling, tied),
Qwen2.5-0.5B (q/k/v biases, tied), Qwen3-0.6B (each head's queries and keys normed,
heads wider than the width's share, tied), Mistral-7B-v0.1 (GQA, a sliding window) and
Phi-3-mini-4k (fused q/k/v and gate/up, a window of half the context less one). Every
key of each published config is kept (the widths, vocabulary and token ids shrunk),
and config.json is written as published (``rope_theta``/``rope_scaling``), not as
transformers 5 rewrites it."""

from __future__ import annotations

import json
from pathlib import Path

import torch

VOCAB = 96
SMALL = dict(hidden_size=64, intermediate_size=112, num_hidden_layers=2,
             num_attention_heads=8)

PUBLISHED = {
    "gpt2": ("GPT2LMHeadModel", "GPT2Config", dict(
        activation_function="gelu_new", attn_pdrop=0.1, bos_token_id=VOCAB - 1, embd_pdrop=0.1,
        eos_token_id=VOCAB - 1, initializer_range=0.02, layer_norm_epsilon=1e-05, n_ctx=64,
        n_embd=64, n_head=4, n_layer=2, n_positions=64, resid_pdrop=0.1,
        summary_activation=None, summary_first_dropout=0.1, summary_proj_to_labels=True,
        summary_type="cls_index", summary_use_proj=True, vocab_size=VOCAB,
        task_specific_params={"text-generation": {"do_sample": True, "max_length": 50}})),
    "tinyllama": ("LlamaForCausalLM", "LlamaConfig", dict(
        SMALL, attention_bias=False, bos_token_id=1, eos_token_id=2, hidden_act="silu",
        initializer_range=0.02, max_position_embeddings=64, num_key_value_heads=2,
        pretraining_tp=1, rms_norm_eps=1e-05, rope_scaling=None, rope_theta=10000.0,
        tie_word_embeddings=False, vocab_size=VOCAB)),
    "llama-3.2": ("LlamaForCausalLM", "LlamaConfig", dict(
        SMALL, attention_bias=False, attention_dropout=0.0, bos_token_id=VOCAB - 2,
        eos_token_id=VOCAB - 1, head_dim=8, hidden_act="silu", initializer_range=0.02,
        max_position_embeddings=256, mlp_bias=False, num_key_value_heads=2,
        pretraining_tp=1, rms_norm_eps=1e-05, rope_theta=500000.0,
        rope_scaling={"factor": 32.0, "high_freq_factor": 4.0, "low_freq_factor": 1.0,
                      "original_max_position_embeddings": 16, "rope_type": "llama3"},
        tie_word_embeddings=True, vocab_size=VOCAB)),
    "qwen2.5": ("Qwen2ForCausalLM", "Qwen2Config", dict(
        SMALL, attention_dropout=0.0, bos_token_id=VOCAB - 1, eos_token_id=VOCAB - 1,
        hidden_act="silu", initializer_range=0.02, max_position_embeddings=128,
        max_window_layers=2, num_key_value_heads=2, rms_norm_eps=1e-06, rope_theta=1000000.0,
        sliding_window=128, tie_word_embeddings=True, use_sliding_window=False,
        vocab_size=VOCAB)),
    "qwen3": ("Qwen3ForCausalLM", "Qwen3Config", dict(  # Qwen3-0.6B's: heads of 16 in 64
        SMALL, attention_bias=False, attention_dropout=0.0, bos_token_id=VOCAB - 2,
        eos_token_id=VOCAB - 1, head_dim=16, hidden_act="silu", initializer_range=0.02,
        max_position_embeddings=128, max_window_layers=2, num_key_value_heads=2,
        rms_norm_eps=1e-06, rope_scaling=None, rope_theta=1000000, sliding_window=None,
        tie_word_embeddings=True, use_cache=True, use_sliding_window=False,
        vocab_size=VOCAB)),
    "mistral": ("MistralForCausalLM", "MistralConfig", dict(
        SMALL, attention_dropout=0.0, bos_token_id=1, eos_token_id=2, hidden_act="silu",
        initializer_range=0.02, max_position_embeddings=128, num_key_value_heads=2,
        rms_norm_eps=1e-05, rope_theta=10000.0, sliding_window=5, tie_word_embeddings=False,
        vocab_size=VOCAB)),
    "gemma": ("GemmaForCausalLM", "GemmaConfig", dict(  # gemma-2b's: one key/value head
        SMALL, attention_bias=False, attention_dropout=0.0, bos_token_id=2, eos_token_id=1,
        head_dim=16, hidden_act="gelu", hidden_activation="gelu_pytorch_tanh",
        initializer_range=0.02,
        max_position_embeddings=128, num_key_value_heads=1, pad_token_id=0,
        rms_norm_eps=1e-06, rope_scaling=None, rope_theta=10000.0, vocab_size=VOCAB)),
    "gemma2": ("Gemma2ForCausalLM", "Gemma2Config", dict(  # gemma-2-2b's; 27b's scalar
        SMALL, attention_bias=False, attention_dropout=0.0, attn_logit_softcapping=50.0,
        bos_token_id=2, cache_implementation="hybrid", eos_token_id=[1, VOCAB - 1],
        final_logit_softcapping=30.0, head_dim=16, hidden_act="gelu_pytorch_tanh",
        hidden_activation="gelu_pytorch_tanh", initializer_range=0.02,
        max_position_embeddings=128, num_key_value_heads=4, pad_token_id=0,
        query_pre_attn_scalar=24, rms_norm_eps=1e-06, rope_theta=10000.0, sliding_window=5,
        vocab_size=VOCAB)),
    "gemma3": ("Gemma3ForCausalLM", "Gemma3TextConfig", dict(  # gemma-3-1b's; 4b's scaling
        SMALL, num_hidden_layers=6, attention_bias=False, attention_dropout=0.0,
        attn_logit_softcapping=None, bos_token_id=2, cache_implementation="hybrid",
        eos_token_id=[1, VOCAB - 1], final_logit_softcapping=None, head_dim=16,
        hidden_activation="gelu_pytorch_tanh", initializer_range=0.02,
        max_position_embeddings=128, num_key_value_heads=1, pad_token_id=0,
        query_pre_attn_scalar=16, rms_norm_eps=1e-06, rope_local_base_freq=10000,
        rope_scaling={"factor": 8.0, "rope_type": "linear"}, rope_theta=1000000,
        sliding_window=4, sliding_window_pattern=6, use_cache=True, vocab_size=VOCAB)),
    "phi3": ("Phi3ForCausalLM", "Phi3Config", dict(  # Phi-3-mini-4k-instruct's
        SMALL, attention_bias=False, attention_dropout=0.0, bos_token_id=1, embd_pdrop=0.0,
        eos_token_id=VOCAB - 1, hidden_act="silu", initializer_range=0.02,
        max_position_embeddings=64, num_key_value_heads=8,
        original_max_position_embeddings=64, pad_token_id=VOCAB - 1, resid_pdrop=0.0,
        rms_norm_eps=1e-05, rope_scaling=None, rope_theta=10000.0, sliding_window=31,
        tie_word_embeddings=False, use_cache=True, vocab_size=VOCAB,
        auto_map={"AutoConfig": "configuration_phi3.Phi3Config",
                  "AutoModelForCausalLM": "modeling_phi3.Phi3ForCausalLM"})),
}
"""Each variant's transformers class, config class and published config (small)."""
END = {name: config["eos_token_id"] if isinstance(config["eos_token_id"], int) else
       config["eos_token_id"][0] for name, (_, _, config) in PUBLISHED.items()}


def save_language_model(variant: str, folder: Path):
    """The variant's transformers model (eval mode, seeded, weights wide enough that
    greedy decoding wanders and sometimes ends, each norm's scale its own) saved in
    ``folder`` with its published config.json; returns the model."""
    import transformers as tf

    model_class, config_class, published = PUBLISHED[variant]
    torch.manual_seed(0)
    model = getattr(tf, model_class)(getattr(tf, config_class)(**published))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "wpe" not in name:
                p.normal_(std=0.5 if ("embed" in name or "wte" in name or "lm_head" in name)
                          else 0.25)
            elif name.endswith("bias"):
                p.normal_(std=0.1)
            elif "norm" in name:  # a scale of its own about each norm's start
                p.add_(torch.randn_like(p) * 0.1)
    model.eval().save_pretrained(folder)
    config = json.loads((folder / "config.json").read_text())
    as_published = {"architectures": [model_class], "model_type": config["model_type"],
                    "torch_dtype": "float32",
                    "transformers_version": config.get("transformers_version"), **published}
    (folder / "config.json").write_text(json.dumps(as_published, indent=2))
    return model


def positions_of(mask: torch.Tensor) -> torch.Tensor:
    """The position ids transformers' generate gives left-padded prompts (``mask`` 1 at
    a real token)."""
    return (mask.cumsum(-1) - 1).clamp(min=0)


def left_padded(vocab: int = VOCAB, low: int = 3):
    """A (3, 8) batch of prompts padded on the left to three lengths, and its
    attention mask (1: a real token)."""
    g = torch.Generator().manual_seed(4)
    prompts = torch.randint(low, vocab - 3, (3, 8), generator=g)
    mask = torch.ones(3, 8, dtype=torch.long)
    for row, pads in enumerate((0, 3, 5)):
        prompts[row, :pads] = 0
        mask[row, :pads] = 0
    return prompts, mask


TEXT = ["The cat sat on the mat.", "A dog ran into the garden.",
        "Über den Fluss führt eine Brücke.", "The weather is nice today, isn't it?",
        "Zoë bought a café au lait and a crème brûlée.", "She sells sea shells by the shore."]
"""Text for a tokenizer (German and French letters: characters of two bytes)."""


def gpt2_with_tokenizer(folder: Path, vocab_size: int = 320):
    """A GPT-2 (random weights, as ``save_language_model``'s) with a byte-level BPE
    tokenizer trained here on :data:`TEXT`, saved as GPT2TokenizerFast writes it; its
    end token <|endoftext|> is the last id."""
    import transformers as tf
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT * 4, vocab_size=vocab_size - 1, min_frequency=1,
                            show_progress=False)
    bpe.add_special_tokens(["<|endoftext|>"])
    tokenizer = tf.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer,
                                           bos_token="<|endoftext|>",
                                           eos_token="<|endoftext|>")
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = dict(PUBLISHED["gpt2"][2], vocab_size=len(tokenizer), bos_token_id=end,
                  eos_token_id=end)
    torch.manual_seed(0)
    model = tf.GPT2LMHeadModel(tf.GPT2Config(**config))
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2 and "wpe" not in name:
                p.normal_(std=0.5 if "wte" in name else 0.25)
    model.eval().save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


CHATML = (
    "{%- if messages[0]['role'] == 'system' %}"
    "{{- '<|im_start|>system\\n' + messages[0]['content'] + '<|im_end|>\\n' }}"
    "{%- else %}{{- '<|im_start|>system\\nYou are a helpful assistant.<|im_end|>\\n' }}"
    "{%- endif %}{%- for message in messages %}{%- if (message.role == 'user') or "
    "(message.role == 'system' and not loop.first) or (message.role == 'assistant') %}"
    "{{- '<|im_start|>' + message.role + '\\n' + message.content + '<|im_end|>' + '\\n' }}"
    "{%- endif %}{%- endfor %}"
    "{%- if add_generation_prompt %}{{- '<|im_start|>assistant\\n' }}{%- endif %}")
"""Qwen2.5-Instruct's chat template (ChatML) without its tools part."""
ZEPHYR = (
    "{% for message in messages %}\n{% if message['role'] == 'user' %}\n"
    "{{ '<|user|>\\n' + message['content'] + eos_token }}\n"
    "{% elif message['role'] == 'system' %}\n{{ '<|system|>\\n' + message['content'] + "
    "eos_token }}\n{% elif message['role'] == 'assistant' %}\n{{ '<|assistant|>\\n'  + "
    "message['content'] + eos_token }}\n{% endif %}\n{% if loop.last and "
    "add_generation_prompt %}\n{{ '<|assistant|>' }}\n{% endif %}\n{% endfor %}")
"""TinyLlama-1.1B-Chat-v1.0's chat template (Zephyr's): a turn ends with the end token."""


def chat_model(folder: Path, template: str, stop_after: int | None = None):
    """A Qwen2.5-Instruct-shaped chat model (Qwen2, untied output) with a byte-level BPE
    tokenizer trained on :data:`TEXT`, its special tokens <|endoftext|> (the end token),
    <|im_start|> and <|im_end|>, and ``template``, saved in ``folder``. With
    ``stop_after``, <|im_end|>'s output row is made 1.1 times that of the token greedy
    decoding picks at that step of the reply to a first message, so that the reply ends
    there at the end of the turn. Returns (model, tokenizer)."""
    import transformers as tf
    from tokenizers import ByteLevelBPETokenizer

    bpe = ByteLevelBPETokenizer()
    bpe.train_from_iterator(TEXT * 4, vocab_size=300, min_frequency=1, show_progress=False)
    bpe.add_special_tokens(["<|endoftext|>", "<|im_start|>", "<|im_end|>"])
    tokenizer = tf.PreTrainedTokenizerFast(tokenizer_object=bpe._tokenizer,
                                           eos_token="<|endoftext|>",
                                           pad_token="<|endoftext|>")
    tokenizer.chat_template = template
    end = tokenizer.convert_tokens_to_ids("<|endoftext|>")
    config = dict(PUBLISHED["qwen2.5"][2], vocab_size=len(tokenizer), bos_token_id=end,
                  eos_token_id=end, tie_word_embeddings=False,
                  max_position_embeddings=4096)  # a context for conversations
    torch.manual_seed(0)
    model = tf.Qwen2ForCausalLM(tf.Qwen2Config(**config)).eval()
    with torch.no_grad():
        for name, p in model.named_parameters():
            if p.dim() == 2:
                p.normal_(std=0.5 if "embed" in name else 0.25)
        if stop_after is not None:
            ids = tokenizer.apply_chat_template(FIRST, add_generation_prompt=True,
                                                return_dict=False)
            out = model.generate(torch.tensor([ids]), max_new_tokens=stop_after + 1,
                                 do_sample=False, eos_token_id=[end])
            chosen = out[0, len(ids) + stop_after]
            head = model.lm_head.weight
            head[tokenizer.convert_tokens_to_ids("<|im_end|>")] = 1.1 * head[chosen]
    model.save_pretrained(folder)
    tokenizer.save_pretrained(folder)
    return model, tokenizer


FIRST = [{"role": "user", "content": "The cat sat on the mat."}]
"""A conversation's first message."""
