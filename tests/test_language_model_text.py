"""A language model's text: ``zoo.complete``, ``zoo.stream_text`` and ``zoo generate`` with
the model's own tokenizer (a GPT-2 and its byte-level BPE, written by transformers) give
transformers' text, stop after a stop string, show a character split across tokens
whole, and refuse what they cannot decode in zoo's words."""

from __future__ import annotations

import pytest
import torch

pytest.importorskip("transformers")

import zoo

from .conftest import run_zoo


PROMPTS = ["The cat", "Über den Fluss", "Zoë bought a"]


@pytest.mark.parametrize("beams", [1, 3])
def test_complete_gives_transformers_text_with_the_models_own_tokenizer(beams, with_tokenizer):
    hf, tokenizer, folder = with_tokenizer
    model = zoo.build(f"local-dir:{folder}")
    tokenizer.padding_side, tokenizer.pad_token = "left", tokenizer.eos_token
    batch = tokenizer(PROMPTS, return_tensors="pt", padding=True)
    with torch.no_grad():
        ref = hf.generate(**batch, max_new_tokens=10, num_beams=beams, do_sample=False,
                          pad_token_id=tokenizer.eos_token_id)
    expected = tokenizer.batch_decode(ref[:, batch["input_ids"].shape[1]:],
                                      skip_special_tokens=True)
    assert zoo.complete(model, PROMPTS, max_new_tokens=10, num_beams=beams) == expected


def test_streamed_text_is_the_completed_text_and_stops_after_a_stop_string(with_tokenizer):
    _, _, folder = with_tokenizer
    model = zoo.build(f"local-dir:{folder}")
    whole = zoo.complete(model, PROMPTS, max_new_tokens=10)
    for prompt, text in zip(PROMPTS, whole):
        assert "".join(zoo.stream_text(model, prompt, max_new_tokens=10)) == text
    steps = list(zoo.stream_text(model, PROMPTS, max_new_tokens=10))
    assert ["".join(row) for row in zip(*steps)] == whole
    stop = whole[0][3:5]  # a string that occurs in the first continuation
    cut = zoo.complete(model, PROMPTS, max_new_tokens=10, stop=[stop])
    assert cut[0] == whole[0][:whole[0].index(stop) + len(stop)]
    assert "".join(zoo.stream_text(model, PROMPTS[0], max_new_tokens=10, stop=[stop])) == cut[0]
    # one prompt as a str is one prompt (it was decoded character by character)
    assert zoo.complete(model, PROMPTS[0], max_new_tokens=10) == whole[0]


def test_zoo_generate_refuses_numbers_it_cannot_decode_in_its_own_words(with_tokenizer):
    folder = with_tokenizer[2]
    for args, says in ((["--beam", "0"], "num_beams"), (["--max-new-tokens", "-5"],
                                                        "max_new_tokens"),
                       (["--beam", "10000000"], "fewer beams"),
                       (["--max-new-tokens", "100"], "max_new_tokens=100 need 102 positions "
                                                     "(the last new token is never read), past "
                                                     "the 64 this model reads")):
        done = run_zoo("generate", f"local-dir:{folder}", "The cat", *args)
        assert done.returncode != 0 and says in done.stderr, done.stderr[-1500:]
        assert "Traceback" not in done.stderr
    # a prompt past the model's context (GPT-2's learned positions: 64 here)
    done = run_zoo("generate", f"local-dir:{folder}", "The cat sat on the mat. " * 40)
    assert done.returncode == 2 and "Traceback" not in done.stderr, done.stderr[-1500:]
    assert "past the 64 positions this model reads" in done.stderr


def test_stop_strings_and_prompts_are_checked_as_texts(with_tokenizer):
    """Stop strings are texts (one str is one stop string) and never empty; prompts may
    come from any iterable; the rest is one RecipeError (they were foreign TypeErrors)."""
    import subprocess
    import sys

    folder = with_tokenizer[2]
    model = zoo.build(f"local-dir:{folder}")
    whole = zoo.complete(model, PROMPTS[:2], max_new_tokens=8)
    assert zoo.complete(model, (p for p in PROMPTS[:2]), max_new_tokens=8) == whole
    stop = whole[0][2:4]
    assert zoo.complete(model, PROMPTS[0], max_new_tokens=8, stop=stop) == zoo.complete(
        model, PROMPTS[0], max_new_tokens=8, stop=[stop])
    for stops, says in (([5], "one is 5 .of type int"), ([None], "one is None"),
                        (b"x", "not one bytes"), ([""], "a stop string is empty")):
        with pytest.raises(zoo.RecipeError, match=says):
            zoo.complete(model, PROMPTS[0], max_new_tokens=4, stop=stops)
        with pytest.raises(zoo.RecipeError, match=says):
            next(iter(zoo.stream_text(model, PROMPTS[0], max_new_tokens=4, stop=stops)))
    with pytest.raises(zoo.RecipeError, match="prompts are texts"):
        zoo.complete(model, ["The cat", 3], max_new_tokens=4)
    done = subprocess.run([sys.executable, "-m", "zoo", "generate", f"local-dir:{folder}", "-"],
                          input=b"The cat\n\xc3(\n", capture_output=True, timeout=300)
    assert done.returncode == 2 and b"Traceback" not in done.stderr, done.stderr[-800:]
    assert b"standard input's line 2 is not UTF-8 (byte 0xc3 at 0)" in done.stderr


def test_a_character_split_across_tokens_is_shown_whole(with_tokenizer):
    from zoo.decoding.text import TextPieces

    _, tokenizer, _ = with_tokenizer
    first, second = tokenizer.convert_tokens_to_ids(["Ã", "©"])  # é's two bytes, apart
    pieces = TextPieces(tokenizer, (), {tokenizer.eos_token_id})
    assert [pieces.add(t) for t in (first, second, tokenizer.eos_token_id)] == ["", "é", ""]
    assert pieces.text == "é" and pieces.done


def test_zoo_generate_streams_continuations_of_prompts_and_standard_input(with_tokenizer):
    _, _, folder = with_tokenizer
    model = zoo.build(f"local-dir:{folder}")
    expected = zoo.complete(model, PROMPTS[:2], max_new_tokens=6)
    done = run_zoo("generate", f"local-dir:{folder}", PROMPTS[0], "-", "--max-new-tokens",
                   "6", input=PROMPTS[1] + "\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout.split("\n")[:2] == [p + t for p, t in zip(PROMPTS, expected)]
    sampled = [run_zoo("generate", f"local-dir:{folder}", PROMPTS[0], "--only-new",
                       "--temperature", "0.8", "--typical-p", "0.9", "--seed", "5",
                       "--set", "no_repeat_ngram_size=2", "--max-new-tokens", "6").stdout
               for _ in range(2)]
    assert sampled[0] == sampled[1]
    assert sampled[0].rstrip("\n") == zoo.complete(model, PROMPTS[:1], max_new_tokens=6,
                                                    do_sample=True, temperature=0.8,
                                                    typical_p=0.9, no_repeat_ngram_size=2,
                                                    seed=5)[0]
    wrong = run_zoo("generate", f"local-dir:{folder}", "x", "--beam", "0")
    assert wrong.returncode != 0 and "num_beams" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    wrong = run_zoo("generate", f"local-dir:{folder}", "x", "--set", "typical=0.5")
    assert wrong.returncode != 0 and "Did you mean 'typical_p'" in wrong.stderr
    assert "Traceback" not in wrong.stderr
    # one loader for every folder: the kind of model decides, said in zoo's words
    wrong = run_zoo("embed", f"local-dir:{folder}", "x")
    assert wrong.returncode != 0 and "is not an encoder" in wrong.stderr
    assert "Traceback" not in wrong.stderr
