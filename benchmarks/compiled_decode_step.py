"""One sentence at a time: zoo's static decoding step (eager) against the same step
compiled whole by ``torch.compile`` (inductor's CPU backend, weights frozen and
prepacked), with attention over the full preallocated buffers under a mask so that
every step has the same shapes and compiles once.

It measures what issue 26 asked of that candidate: the compile time, paid once per
shape (rows, buffer length, source length), and the time of a sentence after it. The
compiled step is written here, calling the model's own modules, for transformer-base's
layout (post-norm, sinusoidal positions, fp32); it is not a path of ``zoo.generate``.
Before timing, it checks that the compiled step's logits equal the
eager static step's, step by step, on the same tokens. Where zoo's native libraries are
built, the eager static step is the C++ one (``torch.classes.zoo_decoder.Plan``) and the
compiled step calls the few-row native product; ``--no-native`` leaves both out.

    python benchmarks/compiled_decode_step.py [--source 20] [--tokens 20] [--rounds 3]
"""

from __future__ import annotations

import argparse
import statistics
import time

import torch

import zoo
import zoo.native
import zoo.ops


def compiled_step(model, decoder, length: int):
    """``step(x, pos) -> logits``: x (rows, 1, d) the embedded tokens, pos a 0-dim
    tensor. Keys and values go into ``decoder``'s buffers at ``pos``; attention reads the
    whole buffer with the positions after ``pos`` masked out."""
    layers = decoder.layers

    def step(x: torch.Tensor, pos: torch.Tensor) -> torch.Tensor:
        rows = x.shape[0]
        allowed = (torch.arange(length) <= pos)[None, None, None, :]
        for layer in layers:
            block, attn, cross = layer.block, layer.block.self_attn, layer.block.cross_attn
            heads, width = attn.n_heads, attn.head_dim
            q, k, v = layer.fused(x).view(rows, 3, heads, width).unbind(1)
            layer.k.index_copy_(2, pos[None], k[:, :, None])
            layer.v.index_copy_(2, pos[None], v[:, :, None])
            scores = (q[:, :, None] @ layer.k.transpose(-1, -2)) * width ** -0.5
            probs = torch.softmax(scores.masked_fill(~allowed, float("-inf")), -1)
            out = (probs @ layer.v).reshape(rows, 1, attn.inner_dim)
            x = block.norm1(x + attn.out_proj(out))
            qc = cross.q_proj(x).view(rows, 1, heads, width).transpose(1, 2)
            scores = (qc @ layer.cross_k.transpose(-1, -2)) * width ** -0.5
            if decoder.keep is not None:
                scores = scores.masked_fill(~decoder.keep, float("-inf"))
            out = (torch.softmax(scores, -1) @ layer.cross_v).transpose(1, 2)
            x = block.norm2(x + cross.out_proj(out.reshape(rows, 1, cross.inner_dim)))
            x = block.norm3(x + block.ffn(x))
        if model.decoder.norm is not None:
            x = model.decoder.norm(x)
        return model.lm_head(x)

    return step


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--source", type=int, default=20)
    parser.add_argument("--tokens", type=int, default=20)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--profile", action="store_true")
    parser.add_argument("--no-native", dest="native", action="store_false",
                        help="leave zoo's native libraries out (ZOO_NATIVE=0 does too)")
    args = parser.parse_args()
    import torch._inductor.config as inductor

    inductor.freezing = True  # weights become constants, prepacked for oneDNN
    torch.manual_seed(0)
    if not args.native:
        zoo.ops.Linear.native_rows = 0  # the C++ step then declines too (native_plan)
    native = zoo.native.available() and zoo.ops.Linear(1, 1).native_row_limit() > 0
    print(f"zoo's native few-row product: {'on' if native else 'off'}")
    model = zoo.build("transformer-base", vocab_size=8000).eval()
    if model.output_scale is not None or model.decoder.layers[0].norm_first:
        raise SystemExit("this benchmark writes out transformer-base's layout only")
    src = torch.randint(3, 7999, (1, args.source))
    n = args.tokens

    with torch.no_grad():
        mask = model.padding_mask(src)
        decoder = model.static_decoder(model.encode(src, mask), mask, groups=1, length=n)
        step = compiled_step(model, decoder, n)
        start = time.perf_counter()
        compiled = torch.compile(step, fullgraph=True, dynamic=False)
        compiled(torch.zeros(1, 1, model.settings.d_model), torch.tensor(0))
        compile_s = time.perf_counter() - start

        def sentence(use_compiled: bool) -> torch.Tensor:
            memory = model.encode(src, mask)
            for layer in decoder.layers:  # the new source's keys and values, same buffers
                k, v = layer.block.cross_attn._keys_values(memory)
                layer.cross_k.copy_(k)
                layer.cross_v.copy_(v)
            decoder.filled = 0
            token, out = torch.ones(1, 1, dtype=torch.long), []
            for i in range(n):
                if use_compiled:
                    x = model._embed(model.tgt_embed, model.decoder, model.positional, token, i)
                    logits = compiled(x, torch.tensor(i))
                else:
                    logits = decoder(token)
                out.append(logits[:, -1])
                token = logits[:, -1].argmax(-1, keepdim=True)
            return torch.stack(out, 1)

        eager, fast = sentence(False), sentence(True)
        torch.testing.assert_close(fast, eager, atol=1e-4, rtol=1e-4)
        print(f"logits equal to the eager static step's over {n} steps (atol 1e-4); "
              f"compile {compile_s:.1f} s")

        def ms(use_compiled: bool) -> float:
            times = []
            for _ in range(10):
                begin = time.perf_counter()
                sentence(use_compiled)
                times.append(time.perf_counter() - begin)
            return statistics.median(times) * 1e3

        print(f"\n{torch.get_num_threads()} threads, source {args.source}, {n} tokens\n")
        print("| round | eager static step, ms a sentence | compiled, ms | eager / compiled |")
        print("|---|---|---|---|")
        for r in range(args.rounds):
            e, c = ms(False), ms(True)
            print(f"| {r + 1} | {e:.1f} | {c:.1f} | {e / c:.2f}x |")
        if args.profile:
            from torch.profiler import profile
            with profile() as prof:
                sentence(True)
            print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=15))


if __name__ == "__main__":
    main()
