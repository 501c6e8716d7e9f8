import dataclasses

import pytest
import sacrebleu

from keras_attn.text import BleuReport, corpus_bleu

HYPOTHESES = [
    "Ein Mann fährt mit dem Fahrrad die Straße entlang.",
    "zwei hunde spielen im schnee",
    "Eine Frau in einem roten Kleid singt auf der Bühne.",
]
REFERENCES = [
    "Ein Mann fährt auf einem Fahrrad die Straße hinunter.",
    "Zwei Hunde spielen im Schnee.",
    "Eine Frau in einem roten Kleid singt auf einer Bühne.",
]


def test_identical_text_scores_100():
    report = corpus_bleu(REFERENCES, REFERENCES)
    assert isinstance(report, BleuReport)
    assert report.bleu == pytest.approx(100.0)
    assert report.lowercase_bleu == pytest.approx(100.0)
    assert report.chrf == pytest.approx(100.0)


def test_matches_sacrebleu_functions():
    report = corpus_bleu(HYPOTHESES, REFERENCES)
    cased = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES])
    lowercased = sacrebleu.corpus_bleu(HYPOTHESES, [REFERENCES], lowercase=True)
    chrf = sacrebleu.corpus_chrf(HYPOTHESES, [REFERENCES])
    assert report.bleu == pytest.approx(cased.score)
    assert report.lowercase_bleu == pytest.approx(lowercased.score)
    assert report.chrf == pytest.approx(chrf.score)
    # Case errors in the second sentence cost cased BLEU only.
    assert 0 < report.bleu < report.lowercase_bleu < 100


def test_signatures_and_str():
    report = corpus_bleu(HYPOTHESES, REFERENCES)
    assert "case:mixed" in report.bleu_signature
    assert "tok:13a" in report.bleu_signature
    assert "case:lc" in report.lowercase_bleu_signature
    assert "tok:13a" in report.lowercase_bleu_signature
    assert f"version:{sacrebleu.__version__}" in report.bleu_signature
    assert "nc:6" in report.chrf_signature  # chrF2: character 6-grams, beta 2.
    text = str(report)
    assert f"BLEU = {report.bleu:.2f}" in text
    assert f"BLEU lowercased = {report.lowercase_bleu:.2f}" in text
    assert f"chrF2 = {report.chrf:.2f}" in text


def test_report_is_frozen():
    report = corpus_bleu(REFERENCES, REFERENCES)
    with pytest.raises(dataclasses.FrozenInstanceError):
        report.bleu = 0.0


def test_mismatched_lengths_name_both():
    with pytest.raises(ValueError, match=r"len\(hypotheses\)=3, len\(references\)=2"):
        corpus_bleu(HYPOTHESES, REFERENCES[:2])


def test_invalid_inputs():
    with pytest.raises(TypeError, match="hypotheses"):
        corpus_bleu("Ein Hund.", ["Ein Hund."])
    with pytest.raises(TypeError, match=r"references\[0\]=b'x'"):
        corpus_bleu(["x"], [b"x"])
    with pytest.raises(ValueError, match="must not be empty"):
        corpus_bleu([], [])
