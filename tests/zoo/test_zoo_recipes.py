"""The three model-zoo recipes on their `--quick` settings, in this process.

Each run must beat the untrained model by a real margin, not just finish:
ViT digits accuracy above 0.5 (chance is 0.1), BBC News accuracy above 0.5
(chance 0.2, five topics), Multi30k validation perplexity down by 70 % or
more.

A recipe chooses its backend (`--backend`, here the test's) and its code
is the same on each: when the backends run side by side, each recipe runs
on one of them (`split_backend`). The language model and BBC News on
torch, where they train eagerly: 14 and 22 CPU seconds, against 31 and 30
on JAX and 47 and 37 on TensorFlow, most of it compilation. The digits
ViT costs JAX and torch the same (16 s): on JAX.
"""

import json
import sys
from pathlib import Path

import keras
import pytest

RECIPES = Path(__file__).resolve().parents[2] / "recipes"
if str(RECIPES) not in sys.path:
    sys.path.insert(0, str(RECIPES))


def run(module_name, output_dir):
    module = __import__(module_name)
    summary = module.main(
        [
            "--quick",
            "--backend",
            keras.backend.backend(),
            "--output-dir",
            str(output_dir),
            "--verbose",
            "0",
        ]
    )
    for name in ("model.keras", "learning_curves.png", "summary.json"):
        assert (output_dir / name).stat().st_size > 0, name
    assert json.loads((output_dir / "summary.json").read_text()) == json.loads(
        json.dumps(summary)
    )
    return summary


@pytest.mark.slow
@pytest.mark.split_backend("jax")
def test_vit_digits_learns(tmp_path):
    summary = run("vit_digits", tmp_path)
    assert summary["untrained_test_accuracy"] < 0.3
    assert summary["test_accuracy"] > 0.5


@pytest.mark.slow
@pytest.mark.split_backend("torch")
def test_classify_text_learns(tmp_path):
    summary = run("classify_text", tmp_path)
    assert summary["classes"] == [
        "business",
        "entertainment",
        "politics",
        "sports",
        "tech",
    ]
    assert summary["untrained_test_accuracy"] < 0.4
    assert summary["test_accuracy"] > 0.5


@pytest.mark.slow
@pytest.mark.split_backend("torch")
def test_language_model_learns_and_samples(tmp_path):
    summary = run("language_model_multi30k", tmp_path)
    before = summary["untrained_validation"]["piece_perplexity"]
    after = summary["validation"]["piece_perplexity"]
    assert after < 0.3 * before, (before, after)
    assert set(summary["samples"]) == {"greedy", "top-k (k=20)", "top-p (p=0.9)"}
    for texts in summary["samples"].values():
        assert len(texts) == 4 and all(text.strip() for text in texts)
    assert (tmp_path / "samples.txt").stat().st_size > 0
