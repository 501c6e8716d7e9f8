"""Beam search against brute-force enumeration and against greedy search."""

import itertools

import keras
import numpy as np
import pytest
from keras import ops

from keras_attn.generation import beam_search, greedy_search, length_penalty, sample
from keras_attn.layers import position_schemes
from keras_attn.models import Transformer

# === A hand-built model whose next-token distribution we choose ===

PAD, START, END, A, B, C = range(6)
TABLE_VOCABULARY = 6
TABLE_MAX_LENGTH = 4
# Next-token probabilities after a prefix (start token left out). Greedy
# follows A, A (0.5 > 0.45), then E: 0.5 * 0.5 * 0.3 = 0.075. The best raw
# log-probability is A, E (0.225) and, with alpha = 0.6, the longer B, B, E
# (0.21675): `log(0.21675) / lp(3) > log(0.225) / lp(2)`.
DESIGNED = {
    (): {A: 0.5, B: 0.3, C: 0.15, END: 0.05},
    (A,): {A: 0.5, END: 0.45, B: 0.03, C: 0.02},
    (A, A): {END: 0.3, A: 0.25, B: 0.25, C: 0.2},
    (B,): {B: 0.85, END: 0.1, A: 0.03, C: 0.02},
    (B, B): {END: 0.85, A: 0.05, B: 0.05, C: 0.05},
}
OTHERWISE = {END: 0.4, A: 0.2, B: 0.2, C: 0.2}


def prefix_code(prefix):
    """A unique integer per prefix: base-`TABLE_VOCABULARY` digits after start."""
    code = START
    for token in prefix:
        code = code * TABLE_VOCABULARY + token
    return code


def build_tables(seed=0):
    """Logits `(2, codes, vocabulary)`: the designed table and a random one."""
    codes = TABLE_VOCABULARY**TABLE_MAX_LENGTH
    rng = np.random.default_rng(seed)
    # Padding and start get large logits: the search must never emit them.
    designed = np.full((codes, TABLE_VOCABULARY), 5.0)
    random = 5.0 + rng.normal(scale=2.0, size=(codes, TABLE_VOCABULARY))
    for length in range(TABLE_MAX_LENGTH):
        for prefix in itertools.product((END, A, B, C), repeat=length):
            probabilities = DESIGNED.get(prefix, OTHERWISE)
            for token, probability in probabilities.items():
                designed[prefix_code(prefix), token] = np.log(probability)
    return np.stack([designed, random]).astype("float32")


class LookupTableModel:
    """The decoding interface of `Transformer`, logits from a lookup table.

    Sentence `i` reads table `encoder_tokens[i, 0]`; the decoder state is the
    prefix code, kept in the cache's `"self_attention"` entry, which beam
    search reorders with the beams.
    """

    pad_id = PAD
    position_scheme = position_schemes.get("sinusoidal")
    max_sequence_length = 64

    def __init__(self, tables):
        self.num_codes, self.vocabulary_size = tables.shape[1:]
        self.tables = ops.convert_to_tensor(tables.reshape(-1, self.vocabulary_size))

    def encode(self, encoder_tokens):
        # (batch, 1, 1): the table id as the "encoder output".
        output = ops.cast(encoder_tokens[:, :1, None], "float32")
        return output, ops.not_equal(encoder_tokens, PAD)

    def initial_cache(self, encoder_output, encoder_padding_mask, max_length):
        table_ids = ops.cast(encoder_output[:, 0, 0], "int32")  # (batch,)
        return {
            "self_attention": (ops.zeros_like(table_ids),),
            "table_ids": table_ids,
            "encoder_padding_mask": encoder_padding_mask,
        }

    def decode_step(self, decoder_tokens, cache, cache_index):
        (codes,) = cache["self_attention"]
        codes = codes * self.vocabulary_size + decoder_tokens[:, 0]
        rows = cache["table_ids"] * self.num_codes + codes
        logits = ops.take(self.tables, rows, axis=0)[:, None, :]  # (batch, 1, V)
        return logits, {**cache, "self_attention": (codes,)}


def log_softmax(logits):
    logits = np.asarray(logits, "float64")
    shifted = logits - logits.max()
    return shifted - np.log(np.exp(shifted).sum())


def brute_force(table, alpha, max_length=TABLE_MAX_LENGTH):
    """Every hypothesis with its length-normalised score, best first.

    A hypothesis ends with the end id or is cut at `max_length`; its length
    counts the end id; padding and start are never emitted.
    """
    allowed = [END, A, B, C]
    hypotheses = []

    def expand(prefix, log_prob):
        step = log_softmax(table[prefix_code(prefix), allowed])
        for token, token_log_prob in zip(allowed, step):
            tokens, total = prefix + (token,), log_prob + token_log_prob
            if token == END or len(tokens) == max_length:
                penalty = ((5.0 + len(tokens)) / 6.0) ** alpha
                hypotheses.append((total / penalty, tokens))
            else:
                expand(tokens, total)

    expand((), 0.0)
    return sorted(hypotheses, key=lambda h: -h[0])


def padded(tokens, length=TABLE_MAX_LENGTH):
    return list(tokens) + [PAD] * (length - len(tokens))


TABLES = build_tables()
TABLE_SOURCE = np.array([[0, 1], [1, 1]], "int32")  # sentence i reads table i
# Every hypothesis fits in the beam: the search is exhaustive, so it must
# agree with enumeration exactly.
ALL_HYPOTHESES = sum(3**n for n in range(TABLE_MAX_LENGTH)) + 3**TABLE_MAX_LENGTH


def test_designed_table_has_the_intended_optima():
    greedy = (A, A, END)
    log_prob = np.log(0.5 * 0.5 * 0.3)
    by_raw = brute_force(TABLES[0], alpha=0.0)
    by_normalised = brute_force(TABLES[0], alpha=0.6)
    assert by_raw[0][1] == (A, END)
    assert by_normalised[0][1] == (B, B, END)
    # Greedy loses on raw log-probability; the longer winner has lower raw
    # log-probability than the shorter one.
    assert by_raw[0][0] > np.log(0.21675) > log_prob
    assert by_raw[0][0] > by_raw[1][0] + 1e-3
    assert by_normalised[0][0] > by_normalised[1][0] + 1e-3
    out = greedy_search(
        LookupTableModel(TABLES),
        TABLE_SOURCE,
        START,
        END,
        max_length=TABLE_MAX_LENGTH,
    )
    np.testing.assert_array_equal(out["tokens"][0], padded(greedy))
    np.testing.assert_allclose(out["scores"][0], log_prob, atol=1e-5)


@pytest.mark.parametrize("alpha", [0.0, 0.6])
def test_exhaustive_beam_equals_brute_force(alpha):
    out = beam_search(
        LookupTableModel(TABLES),
        TABLE_SOURCE,
        START,
        END,
        beam_size=ALL_HYPOTHESES,
        length_penalty_alpha=alpha,
        max_length=TABLE_MAX_LENGTH,
    )
    for row, table in enumerate(TABLES):
        expected = brute_force(table, alpha)
        assert len(expected) == ALL_HYPOTHESES
        np.testing.assert_array_equal(out["tokens"][row], padded(expected[0][1]))
        np.testing.assert_allclose(out["scores"][row], expected[0][0], atol=1e-5)
        # The whole beam, best first, is the sorted list of all hypotheses.
        np.testing.assert_allclose(
            out["beam_scores"][row], [score for score, _ in expected], atol=1e-5
        )
    winner = (A, END) if alpha == 0.0 else (B, B, END)
    np.testing.assert_array_equal(out["tokens"][0], padded(winner))


def test_small_beam_finds_the_normalised_optimum():
    # Beam 2 keeps A and B after step 1, then B, B and A, A: enough here.
    out = beam_search(
        LookupTableModel(TABLES[:1]),
        TABLE_SOURCE[:1],
        START,
        END,
        beam_size=2,
        length_penalty_alpha=0.6,
        max_length=TABLE_MAX_LENGTH,
    )
    expected = brute_force(TABLES[0], 0.6)[0]
    np.testing.assert_array_equal(out["tokens"][0], padded(expected[1]))
    np.testing.assert_allclose(out["scores"][0], expected[0], atol=1e-5)


def counting_while_loop(calls):
    """An eager `keras.ops.while_loop` that counts the body's runs."""

    def while_loop(cond, body, loop_vars, maximum_iterations=None):
        while bool(cond(*loop_vars)):
            loop_vars = body(*loop_vars)
            calls.append(1)
        return loop_vars

    return while_loop


@pytest.mark.parametrize(
    "search, options, steps",
    [
        (greedy_search, {}, 3),
        (sample, {"top_k": 1, "seed": 0}, 3),
        # Beam search runs until every kept hypothesis has ended: here the
        # beam of 2 holds B, B and A, A after step 2, both ending at step 3.
        (beam_search, {"beam_size": 2}, 3),
    ],
)
def test_loop_stops_when_every_sentence_has_ended(monkeypatch, search, options, steps):
    """Without an end the loop would run `max_length` = 2 + 50 steps."""
    calls = []
    monkeypatch.setattr(keras.ops, "while_loop", counting_while_loop(calls))
    out = search(LookupTableModel(TABLES[:1]), TABLE_SOURCE[:1], START, END, **options)
    assert tuple(out["tokens"].shape) == (1, TABLE_SOURCE.shape[1] + 50)
    expected = (A, A, END) if search is not beam_search else (B, B, END)
    np.testing.assert_array_equal(out["tokens"][0], padded(expected, 52))
    assert len(calls) == steps


def test_length_penalty_is_gnmt():
    lengths = np.array([1, 2, 7, 30])
    np.testing.assert_allclose(
        length_penalty(lengths, 0.6), ((5.0 + lengths) / 6.0) ** 0.6, rtol=1e-6
    )
    np.testing.assert_allclose(length_penalty(lengths, 0.0), 1.0)


# === The Transformer: beam 1 is greedy, scores re-computed without a cache ===

VOCABULARY_SIZE, MODEL_START, MODEL_END = 24, 2, 3
MAX_LENGTH = 7
SOURCE = np.array(
    [[5, 6, 7, 8, 0, 0], [4, 9, 10, 11, 12, 13], [20, 21, 5, 6, 7, 0]], "int32"
)


def make_model(seed=0, **overrides):
    keras.utils.set_random_seed(seed)
    return Transformer.from_preset(
        "transformer_tiny",
        vocabulary_size=VOCABULARY_SIZE,
        tie_embeddings=False,
        **overrides,
    )


def set_end_bias(model, value):
    kernel, bias = model.get_layer("logits").get_weights()
    bias[MODEL_END] = value
    model.get_layer("logits").set_weights([kernel, bias])


def teacher_forced_inputs(tokens):
    start = np.full((tokens.shape[0], 1), MODEL_START, "int32")
    return np.concatenate([start, tokens[:, :-1]], axis=1)


def bias_end_for_varied_lengths(model, source, max_length):
    """Biases the end id so that greedy sentences end at different steps.

    With the end id suppressed greedy search follows one path per sentence;
    raising only the end id's logit leaves that path unchanged until the end
    id first wins. Returns that path and the step at which each sentence
    ends (`max_length`: never).
    """
    set_end_bias(model, -30.0)
    path = greedy_search(model, source, MODEL_START, MODEL_END, max_length=max_length)
    encoder_output, encoder_mask = model.encode(source)
    logits = np.asarray(
        model.decode(
            teacher_forced_inputs(np.asarray(path["tokens"])),
            encoder_output,
            encoder_mask,
        )
    )
    others = logits.copy()
    others[..., [PAD, MODEL_START, MODEL_END]] = -np.inf
    # The end id wins at a step once its bias exceeds this margin.
    margins = others.max(axis=-1) - (logits[..., MODEL_END] + 30.0)

    def end_steps(bias):
        wins = margins < bias
        return np.where(wins.any(axis=1), wins.argmax(axis=1), max_length)

    levels = np.unique(margins)
    candidates = (levels[1:] + levels[:-1]) / 2  # far from every tie
    bias = max(candidates, key=lambda b: len(set(end_steps(b))))
    set_end_bias(model, bias)
    return np.asarray(path["tokens"]), end_steps(bias)


def test_beam_size_one_is_greedy():
    """Also greedy's padding after the end id, with sentences ending apart."""
    model = make_model()
    path, end_steps = bias_end_for_varied_lengths(model, SOURCE, MAX_LENGTH)
    assert len(set(end_steps)) >= 2
    # Greedy follows the path, emits the end id at its step, then pads.
    expected = np.full_like(path, PAD)
    for row, step in enumerate(end_steps):
        expected[row, :step] = path[row, :step]
        if step < MAX_LENGTH:
            expected[row, step] = MODEL_END
    greedy = greedy_search(model, SOURCE, MODEL_START, MODEL_END, max_length=MAX_LENGTH)
    beam = beam_search(
        model,
        SOURCE,
        MODEL_START,
        MODEL_END,
        beam_size=1,
        length_penalty_alpha=0.6,
        max_length=MAX_LENGTH,
    )
    tokens = np.asarray(greedy["tokens"])
    np.testing.assert_array_equal(tokens, expected)
    np.testing.assert_array_equal(beam["tokens"], tokens)
    np.testing.assert_array_equal(beam["beam_tokens"][:, 0], tokens)
    lengths = np.sum(tokens != PAD, axis=1)  # the end id included
    np.testing.assert_array_equal(lengths, np.minimum(end_steps + 1, MAX_LENGTH))
    np.testing.assert_allclose(
        beam["scores"],
        np.asarray(greedy["scores"]) / ((5.0 + lengths) / 6.0) ** 0.6,
        rtol=1e-6,
    )


def test_beam_scores_equal_a_full_pass_rescoring():
    """Every kept hypothesis, re-scored by one teacher-forced pass (no cache)."""
    model = make_model(seed=1, normalize_first=True)
    # One sentence, 3 beams: the (3, ...) shapes of the other tests, so eager
    # JAX reuses its compiled operations.
    source, beams, alpha = SOURCE[1:2], 3, 0.6
    out = beam_search(
        model,
        source,
        MODEL_START,
        MODEL_END,
        beam_size=beams,
        length_penalty_alpha=alpha,
        max_length=MAX_LENGTH,
    )
    # (batch * beams, MAX_LENGTH)
    tokens = np.asarray(out["beam_tokens"]).reshape(-1, MAX_LENGTH)
    encoder_output, encoder_mask = model.encode(np.repeat(source, beams, axis=0))
    logits = np.asarray(
        model.decode(teacher_forced_inputs(tokens), encoder_output, encoder_mask),
        "float64",
    )
    logits[..., [PAD, MODEL_START]] = -np.inf
    log_probs = logits - logits.max(-1, keepdims=True)
    log_probs -= np.log(np.exp(log_probs).sum(-1, keepdims=True))
    chosen = np.take_along_axis(log_probs, tokens[..., None], axis=-1)[..., 0]
    generated = tokens != PAD
    lengths = generated.sum(axis=1)
    scores = np.where(generated, chosen, 0.0).sum(axis=1)
    scores /= ((5.0 + lengths) / 6.0) ** alpha
    np.testing.assert_allclose(out["beam_scores"], scores.reshape(-1, beams), atol=1e-4)
    # Best first, and distinct hypotheses per sentence.
    assert np.all(np.diff(out["beam_scores"], axis=1) <= 0)
    for sentence in np.asarray(out["beam_tokens"]):
        assert len({tuple(hypothesis) for hypothesis in sentence}) == beams


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"beam_size": 0}, ValueError, "beam_size=0"),
        ({"beam_size": 2.0}, TypeError, "beam_size=2.0"),
        ({"length_penalty_alpha": -0.1}, ValueError, "length_penalty_alpha=-0.1"),
        ({"start_id": VOCABULARY_SIZE}, ValueError, f"start_id={VOCABULARY_SIZE}"),
        ({"end_id": -1}, ValueError, "end_id=-1"),
        (
            {"encoder_tokens": np.ones((5,), "int32")},
            ValueError,
            r"encoder_tokens.shape=\(5,\)",
        ),
    ],
)
def test_bad_arguments_raise(kwargs, error, match):
    arguments = {
        "encoder_tokens": SOURCE,
        "start_id": MODEL_START,
        "end_id": MODEL_END,
    }
    arguments.update(kwargs)
    with pytest.raises(error, match=match):
        beam_search(LookupTableModel(TABLES), **arguments)
