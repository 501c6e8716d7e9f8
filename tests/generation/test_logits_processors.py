"""Logits processors: Hugging Face's and NumPy's logits, and in the decoding loop."""

import keras
import numpy as np
import pytest
from tiny_seq2seq import END, PAD, START, VOCABULARY_SIZE, make_model

from keras_attn.generation import (
    BannedSequences,
    BannedTokens,
    BeamSampler,
    DecodingContext,
    GreedySampler,
    LogitsProcessor,
    MinNewTokens,
    MinP,
    NoRepeatNGram,
    RepetitionPenalty,
    SequenceGenerator,
    TopKSampler,
    generate_lm,
    generate_seq2seq,
)
from keras_attn.generation.logits_processors import check_processors
from keras_attn.models import TransformerLM

ROWS, LENGTH, INDEX, PROMPT = 3, 9, 5, 2
EOS = (3, 7)


def _inputs():
    rng = np.random.default_rng(0)
    logits = rng.normal(size=(ROWS, VOCABULARY_SIZE)).astype("float32") * 3
    tokens = rng.integers(4, 12, size=(ROWS, LENGTH)).astype("int32")
    tokens[0, 1:6] = [4, 5, 4, 5, 4]  # repeated bigrams; ends with the prefix 4
    tokens[1, 4:6] = [8, 9]  # the first token of the banned [8, 9, 10]
    return logits, tokens


# --- NumPy references, from the processors' definitions ---------------------


def np_repetition(logits, tokens, penalty):
    out = logits.copy()
    for row, seen in enumerate(tokens[:, : INDEX + 1]):
        for token in set(seen):
            value = out[row, token]
            out[row, token] = value * penalty if value < 0 else value / penalty
    return out


def np_no_repeat(logits, tokens, n):
    out = logits.copy()
    for row, ids in enumerate(tokens[:, : INDEX + 1].tolist()):
        suffix = ids[len(ids) - n + 1 :] if n > 1 else []
        for start in range(len(ids) - n + 1):
            if ids[start : start + n - 1] == suffix:
                out[row, ids[start + n - 1]] = -np.inf
    return out


def np_min_new(logits, tokens, minimum):
    out = logits.copy()
    if INDEX + 1 - PROMPT < minimum:
        out[:, list(EOS)] = -np.inf
    return out


def np_banned(logits, tokens, sequences):
    out = logits.copy()
    for row, ids in enumerate(tokens[:, : INDEX + 1].tolist()):
        for *before, last in sequences:
            if not before or ids[len(ids) - len(before) :] == before:
                out[row, last] = -np.inf
    return out


def np_min_p(logits, tokens, p):
    probs = np.exp(logits - logits.max(-1, keepdims=True))
    probs /= probs.sum(-1, keepdims=True)
    return np.where(probs < p * probs.max(-1, keepdims=True), -np.inf, logits)


SEQUENCES = [[8, 9, 10], [4, 11], [13]]
CASES = {
    "repetition": (
        RepetitionPenalty(1.5),
        lambda x, t: np_repetition(x, t, 1.5),
        lambda hf: hf.RepetitionPenaltyLogitsProcessor(penalty=1.5),
    ),
    "no_repeat_1": (
        NoRepeatNGram(1),
        lambda x, t: np_no_repeat(x, t, 1),
        lambda hf: hf.NoRepeatNGramLogitsProcessor(1),
    ),
    "no_repeat_2": (
        NoRepeatNGram(2),
        lambda x, t: np_no_repeat(x, t, 2),
        lambda hf: hf.NoRepeatNGramLogitsProcessor(2),
    ),
    "no_repeat_3": (
        NoRepeatNGram(3),
        lambda x, t: np_no_repeat(x, t, 3),
        lambda hf: hf.NoRepeatNGramLogitsProcessor(3),
    ),
    "min_new": (
        MinNewTokens(5),
        lambda x, t: np_min_new(x, t, 5),
        lambda hf: hf.MinNewTokensLengthLogitsProcessor(PROMPT, 5, list(EOS)),
    ),
    "banned": (
        BannedSequences(SEQUENCES),
        lambda x, t: np_banned(x, t, SEQUENCES),
        lambda hf: hf.NoBadWordsLogitsProcessor(SEQUENCES, eos_token_id=END),
    ),
    "min_p": (
        MinP(0.2),
        lambda x, t: np_min_p(x, t, 0.2),
        lambda hf: hf.MinPLogitsWarper(0.2),
    ),
}


def test_processors_equal_numpy_and_hugging_face():
    """Every processor, on the same logits: ours = NumPy = transformers."""
    logits, tokens = _inputs()
    context = DecodingContext(
        tokens=keras.ops.convert_to_tensor(tokens),
        index=keras.ops.convert_to_tensor(INDEX, "int32"),
        prompt_lengths=keras.ops.full((ROWS,), PROMPT, "int32"),
        end_ids=EOS,
    )
    try:
        import torch
        import transformers as hf
    except ImportError:
        hf = None
    for name, (processor, reference, hugging_face) in CASES.items():
        ours = keras.ops.convert_to_numpy(
            processor(keras.ops.convert_to_tensor(logits), context)
        )
        expected = reference(logits, tokens)
        np.testing.assert_allclose(ours, expected, rtol=1e-6, err_msg=name)
        assert np.isinf(ours).any() or name == "repetition", name  # it bites
        if hf is not None:
            theirs = hugging_face(hf)(
                torch.tensor(tokens[:, : INDEX + 1], dtype=torch.long),
                torch.tensor(logits),
            ).numpy()
            np.testing.assert_allclose(ours, theirs, rtol=1e-6, err_msg=name)
    banned = BannedTokens([5, 9])(keras.ops.convert_to_tensor(logits), context)
    banned = keras.ops.convert_to_numpy(banned)
    assert np.isneginf(banned[:, [5, 9]]).all()
    np.testing.assert_array_equal(
        np.delete(banned, [5, 9], 1), np.delete(logits, [5, 9], 1)
    )


def test_processors_serialize_and_check_their_arguments():
    processors = [case[0] for case in CASES.values()] + [BannedTokens([5])]
    for processor in processors:
        config = keras.saving.serialize_keras_object(processor)
        assert config["registered_name"].startswith("keras_attn>")
        assert keras.saving.deserialize_keras_object(config) == processor
    with pytest.raises(ValueError, match=r"`penalty` must be .* Received: penalty=0"):
        RepetitionPenalty(0)
    with pytest.raises(
        ValueError, match="`n` must be a positive integer. Received: n=0"
    ):
        NoRepeatNGram(0)
    with pytest.raises(ValueError, match="Received: min_new_tokens=-1"):
        MinNewTokens(-1)
    with pytest.raises(ValueError, match=r"`p` must be .* Received: p=0"):
        MinP(0)
    with pytest.raises(ValueError, match="must not be empty"):
        BannedTokens([])
    with pytest.raises(ValueError, match="`sequences` must be a sequence"):
        BannedSequences([[1, -2]])
    assert isinstance(MinP(0.5), LogitsProcessor)


@pytest.fixture(scope="module")
def model():
    return make_model()


SOURCE = np.array([[5, 6, 7, 8, 0, 0], [4, 9, 10, 11, 12, 13]], "int32")
MAX_LENGTH = 8


@pytest.fixture(scope="module")
def plain(model):
    """Greedy tokens without processors."""
    out = generate_seq2seq(model, SOURCE, START, END, max_length=MAX_LENGTH)
    return keras.ops.convert_to_numpy(out["tokens"])


def _bigrams(row):
    row = [t for t in row.tolist() if t != PAD]
    return [tuple(row[i : i + 2]) for i in range(len(row) - 1)]


def test_processors_in_the_loop_every_sampler_eager_and_compiled(model, plain):
    """The processors bite for greedy, beam and sampling; compiled = eager."""
    processors = [NoRepeatNGram(2), BannedTokens([5, 6]), MinNewTokens(4)]
    samplers = [GreedySampler(), BeamSampler(num_beams=3), TopKSampler(k=4, seed=1)]
    outputs = []
    for sampler in samplers:
        if sampler.is_random:
            sampler = sampler.with_seed(keras.random.SeedGenerator(1))
        out = generate_seq2seq(
            model,
            SOURCE,
            START,
            END,
            sampler,
            max_length=MAX_LENGTH,
            processors=processors,
        )
        tokens = keras.ops.convert_to_numpy(out["tokens"])
        for row in tokens:
            bigrams = _bigrams(np.concatenate([[START], row]))
            assert len(bigrams) == len(set(bigrams)), (sampler, row)
            assert not np.isin(row, [5, 6]).any(), (sampler, row)
            ends = np.flatnonzero(row == END)
            assert not len(ends) or ends[0] >= 4, (sampler, row)
        assert np.isfinite(keras.ops.convert_to_numpy(out["scores"])).all()
        outputs.append(out)
    # The eager loop of `samplers[0]`, `GreedySampler()`, with the processors.
    eager = outputs[0]
    compiled = SequenceGenerator(
        model,
        start_id=START,
        end_id=END,
        sampler="greedy",
        processors=processors,
        max_length=MAX_LENGTH,
    ).generate(SOURCE)
    np.testing.assert_array_equal(compiled["tokens"], eager["tokens"])
    assert not np.array_equal(plain, compiled["tokens"])  # the processors changed it
    # An empty list is no processor at all.
    assert check_processors([], VOCABULARY_SIZE) == ()


def test_several_end_ids_and_a_prefix(model, plain):
    # The first generated token of row 0 as a second end id: row 0 stops there.
    stop = int(plain[0, 0])
    out = keras.ops.convert_to_numpy(
        generate_seq2seq(model, SOURCE, START, [END, stop], max_length=MAX_LENGTH)[
            "tokens"
        ]
    )
    assert out[0, 0] == stop and (out[0, 1:] == PAD).all()
    rows_left = out[1][: np.argmax(np.isin(out[1], [END, stop])) + 1]
    np.testing.assert_array_equal(rows_left, plain[1][: len(rows_left)])
    # A prefix per sentence, right-padded, kept verbatim for greedy and beam.
    prefix = np.array([[9, 10, 11], [12, 0, 0]], "int32")
    for sampler in (GreedySampler(), BeamSampler(num_beams=2)):
        out = generate_seq2seq(
            model,
            SOURCE,
            START,
            END,
            sampler,
            max_length=MAX_LENGTH,
            prefix_tokens=prefix,
        )
        tokens = keras.ops.convert_to_numpy(out["tokens"])
        np.testing.assert_array_equal(tokens[0, :3], [9, 10, 11])
        assert tokens[1, 0] == 12
        if "beam_tokens" in out:
            beams = keras.ops.convert_to_numpy(out["beam_tokens"])
            np.testing.assert_array_equal(beams[0, :, :3], [[9, 10, 11]] * 2)
    with pytest.raises(ValueError, match="`end_id` must be a token id in"):
        generate_seq2seq(model, SOURCE, START, [END, VOCABULARY_SIZE])
    with pytest.raises(ValueError, match="`prefix_tokens` must be shorter than"):
        generate_seq2seq(model, SOURCE, START, END, max_length=3, prefix_tokens=prefix)
    with pytest.raises(ValueError, match=r"`token_ids` must hold token ids in"):
        generate_seq2seq(model, SOURCE, START, END, processors=[BannedTokens([99])])
    with pytest.raises(TypeError, match="`processors` must be a list"):
        generate_seq2seq(model, SOURCE, START, END, processors=MinP(0.1))


def test_lm_processors_count_new_tokens_after_each_prompt():
    keras.utils.set_random_seed(0)
    # One layer, as `make_model`'s: the processors' counting is the point.
    lm = TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=VOCABULARY_SIZE, num_layers=1
    )
    prompts = np.array([[2, 7, 9, 0], [2, 4, 0, 0]], "int32")
    plain = keras.ops.convert_to_numpy(
        generate_lm(lm, prompts, max_length=MAX_LENGTH)["tokens"]
    )
    # The first token after each prompt as end ids: both rows stop at once.
    first = [int(plain[0, 3]), int(plain[1, 2])]
    stopped = keras.ops.convert_to_numpy(
        generate_lm(lm, prompts, max_length=MAX_LENGTH, end_id=first)["tokens"]
    )
    assert (stopped[0, 4:] == PAD).all() and (stopped[1, 3:] == PAD).all()
    out = generate_lm(
        lm, prompts, max_length=MAX_LENGTH, end_id=first, processors=[MinNewTokens(3)]
    )
    tokens = keras.ops.convert_to_numpy(out["tokens"])
    for row, length in zip(tokens, (3, 2)):
        assert not np.isin(row[length : length + 3], first).any(), row
