"""Corpus BLEU and chrF with sacreBLEU, reported the ways papers report them."""

import dataclasses

from sacrebleu.metrics import BLEU, CHRF

from keras_attn.validation import check_string_pairs


@dataclasses.dataclass(frozen=True)
class BleuReport:
    """Translation scores of one corpus, each with its sacreBLEU signature.

    Attributes:
        bleu: cased BLEU on detokenized text, sacreBLEU's defaults (13a
            tokenization inside the metric). The number to compare across
            papers (Post, 2018).
        bleu_signature: sacreBLEU's signature string for `bleu`.
        lowercase_bleu: BLEU on lowercased text with the 13a tokenizer: the
            convention of the Multi30k papers (lowercased, tokenized text
            scored with Moses' `multi-bleu.perl`), computed by sacreBLEU.
        lowercase_bleu_signature: the signature for `lowercase_bleu`.
        chrf: chrF2 (character n-gram F-score) on detokenized text.
        chrf_signature: the signature for `chrf`.
    """

    bleu: float
    bleu_signature: str
    lowercase_bleu: float
    lowercase_bleu_signature: str
    chrf: float
    chrf_signature: str

    def __str__(self):
        return (
            f"BLEU = {self.bleu:.2f} ({self.bleu_signature})\n"
            f"BLEU lowercased = {self.lowercase_bleu:.2f} "
            f"({self.lowercase_bleu_signature})\n"
            f"chrF2 = {self.chrf:.2f} ({self.chrf_signature})"
        )


def corpus_bleu(hypotheses, references):
    """Scores detokenized translations against one reference each.

    Computes three corpus-level scores with sacreBLEU's metric classes:
    cased BLEU on detokenized text (the comparable number), lowercased BLEU
    with the 13a tokenizer (what the Multi30k literature reports, e.g.
    Elliott et al., 2016, with `multi-bleu.perl` on lowercased tokenized
    text), and chrF2. Pass detokenized text: the metrics tokenize internally.

    Args:
        hypotheses: list of `str`, the system's translations.
        references: list of `str`, one reference per hypothesis.

    Returns:
        A `BleuReport`.

    Example:

    >>> from keras_attn.text import corpus_bleu
    >>> report = corpus_bleu(["Ein Hund läuft."], ["Ein Hund läuft."])
    >>> report.bleu
    100.00000000000004

    References:
        - [Post, 2018](https://aclanthology.org/W18-6319/), A Call for
          Clarity in Reporting BLEU Scores.
        - [Popović, 2015](https://aclanthology.org/W15-3049/), chrF:
          character n-gram F-score for automatic MT evaluation.
    """
    hypotheses, references = check_string_pairs(
        hypotheses, references, "hypotheses", "references"
    )
    streams = [references]  # sacreBLEU takes one list per reference set.
    cased = BLEU()
    lowercased = BLEU(lowercase=True, tokenize="13a")
    chrf = CHRF()
    cased_score = cased.corpus_score(hypotheses, streams)
    lowercased_score = lowercased.corpus_score(hypotheses, streams)
    chrf_score = chrf.corpus_score(hypotheses, streams)
    return BleuReport(
        bleu=cased_score.score,
        bleu_signature=str(cased.get_signature()),
        lowercase_bleu=lowercased_score.score,
        lowercase_bleu_signature=str(lowercased.get_signature()),
        chrf=chrf_score.score,
        chrf_signature=str(chrf.get_signature()),
    )
