"""benchmarks/translate_reference.py stays runnable: both trainers, 15 seconds each."""

from __future__ import annotations

import importlib.util
import json
import sys
from pathlib import Path

import pytest

from .test_training import needs_trans

SCRIPT = Path(__file__).parents[1] / "benchmarks" / "translate_reference.py"


@needs_trans
@pytest.mark.slow(seconds=60)
def test_reference_trainer_runs_beside_zoo_at_a_quarter_minute_budget(tmp_path, capsys):
    pytest.importorskip("accelerate")
    spec = importlib.util.spec_from_file_location("translate_reference", SCRIPT)
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    out = tmp_path / "rows.json"
    assert module.main(["--minutes", "0.25", "--test-limit", "40", "--out", str(tmp_path / "runs"),
                        "--json", str(out)]) == 0
    rows = json.loads(out.read_text())
    assert [r["impl"] for r in rows] == ["zoo", "Marian + Seq2SeqTrainer"]
    for row in rows:
        # a quarter of a minute on a loaded machine may not yet give one right character n-gram
        assert row["steps"] > 0 and 0.0 <= row["bleu"] <= 100.0 and 0.0 <= row["chrf"] <= 100.0
    # the reference trained for the budget, not beyond it (one step may run past)
    assert rows[1]["seconds"] < 15 + 30
    printed = capsys.readouterr().out
    assert "| zoo |" in printed and "| Marian + Seq2SeqTrainer |" in printed
