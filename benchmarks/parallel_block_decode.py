"""A plugin's parallel-residual block in zoo's native decoding step, against zoo's own
sequential block of the same shape, in one process, turn by turn.

GPT-NeoX folders of one shape are made with transformers (random weights): one with
``use_parallel_residual: true``, read by the GPT-NeoX plugin of the tests
(``tests/fixtures/zoo-plugin-neox``, installed here into a temporary folder) into its own
``parallel`` block, one with ``false``, read into zoo's built-in ``causal`` block. Each is
decoded greedily by ``zoo.generate`` (8 prompts, and one prompt), natively, and the
parallel model once more by the general path (``static_decoding = False``). The issue's
target: the plugin's block within 10% of the built-in's.

    python benchmarks/parallel_block_decode.py [--layers 6] [--width 512] [--rounds 9]
"""

from __future__ import annotations

import argparse
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

ROOT = Path(__file__).resolve().parents[1]


def folders(out: Path, args) -> dict[str, Path]:
    from transformers import GPTNeoXConfig, GPTNeoXForCausalLM

    made = {}
    for name, parallel in (("parallel", True), ("sequential", False)):
        torch.manual_seed(0)
        config = GPTNeoXConfig(vocab_size=args.vocab, hidden_size=args.width,
                               num_hidden_layers=args.layers,
                               num_attention_heads=args.width // 64,
                               intermediate_size=4 * args.width, rotary_pct=0.25,
                               max_position_embeddings=1024, use_parallel_residual=parallel,
                               tie_word_embeddings=False, bos_token_id=0, eos_token_id=0)
        GPTNeoXForCausalLM(config).eval().save_pretrained(out / name)
        made[name] = out / name
    return made


def timed(cases: dict, prompts, new: int, rounds: int) -> dict[str, float]:
    """Each case's (a model, and whether it decodes natively) median seconds of a greedy
    decoding of ``new`` tokens after ``prompts``, the cases taking turns round by round
    (so a change of the machine's speed falls on all of them alike)."""
    import zoo

    kwargs = dict(max_new_tokens=new, min_new_tokens=new, do_sample=False)
    times: dict[str, list[float]] = {name: [] for name in cases}
    with torch.inference_mode():
        for round_ in range(rounds + 1):
            for name, (model, native) in cases.items():
                model.static_decoding = native
                start = time.perf_counter()
                zoo.generate(model, prompts, **kwargs)
                if round_:  # the first round warms up: the plans made and kept
                    times[name].append(time.perf_counter() - start)
                del model.static_decoding
    return {name: sorted(t)[len(t) // 2] for name, t in times.items()}


def main() -> None:
    p = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    p.add_argument("--layers", type=int, default=6)
    p.add_argument("--width", type=int, default=512)
    p.add_argument("--vocab", type=int, default=8000)
    p.add_argument("--new-tokens", type=int, default=32)
    p.add_argument("--rounds", type=int, default=9)
    args = p.parse_args()
    with tempfile.TemporaryDirectory() as tmp:
        site = Path(tmp) / "site"
        subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                        "--no-build-isolation", "--no-index", "--target", str(site),
                        str(ROOT / "tests" / "fixtures" / "zoo-plugin-neox")], check=True)
        sys.path.insert(0, str(site))
        import zoo

        made = folders(Path(tmp), args)
        models = {name: zoo.build(f"local-dir:{folder}").eval() for name, folder in made.items()}
        blocks = {name: type(m.layers[0]).__name__ for name, m in models.items()}
        for name, m in models.items():
            plan = m.native_plan()
            print(f"{name}: {blocks[name]}, native step: "
                  f"{'yes' if plan else 'no (' + plan.reason + ')'}")
        g = torch.Generator().manual_seed(1)
        batch = torch.randint(5, args.vocab, (8, 16), generator=g)
        one = batch[:1]
        rows = []
        cases = {"parallel": (models["parallel"], True),
                 "sequential": (models["sequential"], True),
                 "general": (models["parallel"], False)}
        for label, prompts in (("8 prompts", batch), ("1 prompt", one)):
            tokens = prompts.shape[0] * args.new_tokens
            t = timed(cases, prompts, args.new_tokens, args.rounds)
            rows.append((label, tokens / t["parallel"], tokens / t["sequential"],
                         tokens / t["general"]))
        print(f"\n{args.layers} layers of width {args.width}, vocabulary {args.vocab}, "
              f"{args.new_tokens} new tokens, greedy, torch threads {torch.get_num_threads()}")
        print("| prompts | plugin's parallel block, native | zoo's causal block, native | "
              "plugin / zoo | parallel, general path |")
        print("|---|---|---|---|---|")
        for label, par, seq, gen in rows:
            print(f"| {label} | {par:,.0f} tokens/s | {seq:,.0f} tokens/s | {par / seq:.2f}x | "
                  f"{gen:,.0f} tokens/s |")


if __name__ == "__main__":
    main()
