"""Minimum Bayes risk selection among candidate translations, by chrF."""

from sacrebleu.metrics import CHRF

from keras_attn.text.task_checks import check_texts


def _check_candidates(candidates):
    """`candidates` as a list of non-empty lists of strings."""
    if isinstance(candidates, str) or not isinstance(candidates, (list, tuple)):
        raise TypeError(
            "`candidates` must be a list with one list of strings per "
            f"sentence. Received: candidates={candidates!r:.100}"
        )
    checked = []
    for i, texts in enumerate(candidates):
        if isinstance(texts, str) or not isinstance(texts, (list, tuple)):
            raise TypeError(
                "`candidates` must be a list with one list of strings per "
                f"sentence. Received: candidates[{i}]={texts!r:.100}"
            )
        if not texts:
            raise ValueError(
                "Each sentence needs at least one candidate. Received: "
                f"candidates[{i}]=[]"
            )
        checked.append(check_texts(list(texts), f"candidates[{i}]"))
    return checked


def minimum_bayes_risk(candidates):
    """Picks, per sentence, the candidate that agrees most with the others.

    Minimum Bayes risk decoding (Kumar and Byrne, 2004; with samples as
    pseudo-references, Eikema and Aziz, 2020): each candidate is scored by
    its mean chrF (sacrebleu's `CHRF`, sentence level) against every
    candidate of its sentence as the reference, and the highest mean wins;
    a tie goes to the earlier candidate (an n-best list's better one).
    Repeated candidates count as often as they appear, so samples drawn
    several times weigh more.

    Args:
        candidates: a list with one list of strings per sentence: an n-best
            list (`Translator.translate(..., num_return_sequences=k)`) or
            samples (several seeded `translate` calls of a sampling
            translator).

    Returns:
        A list of strings, one per sentence.

    Example:

    >>> keras_attn.text.minimum_bayes_risk([[
    ...     "Ein Hund rennt über die Wiese.",
    ...     "Ein Hund läuft über eine Wiese.",
    ...     "Ein Hund rennt über eine Wiese.",
    ...     "Zwei Männer sitzen.",
    ... ]])
    ['Ein Hund rennt über eine Wiese.']

    References:
        - [Kumar and Byrne, 2004](https://aclanthology.org/N04-1022/)
        - [Eikema and Aziz, 2020](https://aclanthology.org/2020.coling-main.398/)
        - [Popović, 2015 (chrF)](https://aclanthology.org/W15-3049/)
    """
    candidates = _check_candidates(candidates)
    chrf = CHRF()
    chosen = []
    for texts in candidates:
        best, best_utility = texts[0], None
        for hypothesis in texts:
            utility = sum(
                chrf.sentence_score(hypothesis, [reference]).score
                for reference in texts
            ) / len(texts)
            if best_utility is None or utility > best_utility:
                best, best_utility = hypothesis, utility
        chosen.append(best)
    return chosen
