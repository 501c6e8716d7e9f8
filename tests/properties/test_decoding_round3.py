"""Decoding, round 3: conflicting special ids, extreme temperatures and
length penalties, `max_length` beyond the model, prompts and sources longer
than the model, mismatched batches, and a generator built inside a
`tf.distribute.MirroredStrategy` scope. Each is the right result or a
ValueError/TypeError that names the argument, the same on every backend."""

import os
import subprocess
import sys
import textwrap

import keras
import numpy as np
import pytest
from hostile_values import PROPERTY_SETTINGS
from hypothesis import given
from hypothesis import strategies as st

from keras_attn.generation import (
    BeamSampler,
    RandomSampler,
    SequenceGenerator,
    TopKSampler,
    beam_search,
    generate_lm,
    generate_seq2seq,
    greedy_search,
    sample,
)
from keras_attn.models import Transformer, TransformerLM

VOCABULARY_SIZE, PAD, START, END = 24, 0, 2, 3
SOURCE = np.array([[5, 6, 7, 3], [4, 9, 3, 0], [8, 8, 8, 3]], "int32")
REPO_ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
# The tiny presets with one layer (of each stack): what is checked here is
# the decoding loop and its arguments, whatever the depth, and each decoding
# loop compiles every layer (seconds per layer on JAX).
ONE_LAYER = dict(vocabulary_size=VOCABULARY_SIZE, num_layers=1)


@pytest.fixture(scope="module")
def seq2seq():
    """Sinusoidal positions, `max_sequence_length=64`."""
    keras.utils.set_random_seed(0)
    return Transformer.from_preset("transformer_tiny", **ONE_LAYER)


@pytest.fixture(scope="module")
def learned():
    keras.utils.set_random_seed(0)
    return Transformer.from_preset(
        "transformer_tiny", position="learned", max_sequence_length=16, **ONE_LAYER
    )


@pytest.fixture(scope="module")
def lm():
    """Learned positions, `max_sequence_length=64`."""
    keras.utils.set_random_seed(0)
    return TransformerLM.from_preset("lm_tiny", **ONE_LAYER)


def generated_before_end(tokens):
    """The ids of each row before its first end id."""
    rows = []
    for row in np.asarray(tokens):
        ends = np.flatnonzero(row == END)
        rows.append(row[: ends[0]] if len(ends) else row)
    return np.concatenate(rows)


# === Special ids that conflict ===

CONFLICTS = [
    # (start_id, end_id, the names and values the message must hold)
    (3, 3, ("start_id=3", "end_id=3")),
    (2, PAD, ("end_id=0", "pad_id=0")),
    (PAD, 3, ("start_id=0", "pad_id=0")),
]


@pytest.mark.parametrize("start_id, end_id, named", CONFLICTS)
@pytest.mark.parametrize("entry_point", ["generator", "generate_seq2seq", "greedy"])
def test_conflicting_special_ids_are_refused(
    seq2seq, entry_point, start_id, end_id, named
):
    with pytest.raises(ValueError) as info:
        if entry_point == "generator":
            SequenceGenerator(seq2seq, "greedy", start_id, end_id, max_length=4)
        elif entry_point == "generate_seq2seq":
            generate_seq2seq(seq2seq, SOURCE, start_id, end_id, max_length=4)
        else:
            greedy_search(seq2seq, SOURCE, start_id, end_id, max_length=4)
    for text in named:
        assert text in str(info.value)


@PROPERTY_SETTINGS
@given(
    start_id=st.integers(0, VOCABULARY_SIZE - 1),
    end_id=st.integers(0, VOCABULARY_SIZE - 1),
)
def test_any_two_ids_decode_or_are_refused_by_name(seq2seq, start_id, end_id):
    conflict = start_id == end_id or PAD in (start_id, end_id)
    if not conflict:
        SequenceGenerator(seq2seq, "greedy", start_id, end_id, max_length=4)
        return
    with pytest.raises(ValueError) as info:
        SequenceGenerator(seq2seq, "greedy", start_id, end_id, max_length=4)
    message = str(info.value)
    named = [f"start_id={start_id}", f"end_id={end_id}", f"pad_id={PAD}"]
    assert sum(text in message for text in named) == 2, message


def test_lm_end_id_equal_to_padding_is_refused(lm):
    prompts = np.full((2, 2), 5, "int32")
    with pytest.raises(ValueError, match="end_id=0, pad_id=0"):
        generate_lm(lm, prompts, max_length=6, end_id=PAD)
    with pytest.raises(ValueError, match="end_id=0, pad_id=0"):
        SequenceGenerator(lm, sampler="greedy", end_id=PAD, max_length=6)


# === Temperature ===


@pytest.mark.parametrize("temperature", [1e-40, 1e-7, 0.0, -1.0])
def test_temperature_below_its_range_is_refused(seq2seq, lm, temperature):
    expected = r"`temperature` must be a finite number >= 1e-06"
    with pytest.raises(ValueError, match=expected):
        RandomSampler(temperature=temperature)
    with pytest.raises(ValueError, match=expected):
        sample(seq2seq, SOURCE, START, END, temperature=temperature, max_length=4)
    with pytest.raises(ValueError, match=expected):
        SequenceGenerator(seq2seq, "sample", temperature=temperature, max_length=4)
    with pytest.raises(ValueError, match=expected):
        generate_lm(lm, SOURCE, 6, strategy="sample", temperature=temperature, seed=1)


def test_smallest_temperature_samples_as_greedy_decoding(seq2seq):
    greedy = SequenceGenerator(seq2seq, "greedy", START, END, max_length=6)
    coldest = SequenceGenerator(
        seq2seq, sampler=RandomSampler(temperature=1e-6, seed=1), max_length=6
    )
    np.testing.assert_array_equal(
        coldest.generate(SOURCE)["tokens"], greedy.generate(SOURCE)["tokens"]
    )


@pytest.mark.parametrize("temperature", [1e9, 1e30])
@pytest.mark.parametrize("sampler", [RandomSampler, TopKSampler])
def test_huge_temperatures_never_sample_padding_or_start(seq2seq, sampler, temperature):
    # Nearly uniform over the vocabulary: without the -inf mask, padding and
    # start (2 of 24 ids) would come up in 3 rows x 8 steps.
    options = {"k": VOCABULARY_SIZE} if sampler is TopKSampler else {}
    generator = SequenceGenerator(
        seq2seq,
        sampler=sampler(temperature=temperature, seed=3, **options),
        max_length=8,
    )
    result = generator.generate(SOURCE)
    ids = generated_before_end(result["tokens"])
    assert not np.isin(ids, [PAD, START]).any(), result["tokens"]
    assert np.all(np.isfinite(result["scores"]))
    assert np.all(result["scores"] > -1e8)  # no suppressed id was scored


def test_huge_temperature_in_a_language_model(lm):
    prompts = np.array([[5, 6, 0], [7, 8, 9]], "int32")
    result = generate_lm(
        lm, prompts, 12, sampler=RandomSampler(temperature=1e9, seed=2)
    )
    tokens = np.asarray(result["tokens"])
    np.testing.assert_array_equal(tokens[1, :3], prompts[1])
    # Row 0 continues at its third position; padding is never generated.
    assert not np.isin(tokens[0, 2:], [PAD]).any(), tokens
    assert not np.isin(tokens[1, 3:], [PAD]).any(), tokens


# === Length penalty ===


@pytest.mark.parametrize("alpha", [1e6, 10.5, -0.1])
def test_length_penalty_alpha_outside_its_range_is_refused(seq2seq, alpha):
    expected = r"`length_penalty_alpha` must be a finite number in \[0.0, 10.0\]"
    with pytest.raises(ValueError, match=expected):
        BeamSampler(length_penalty_alpha=alpha)
    with pytest.raises(ValueError, match=expected):
        beam_search(seq2seq, SOURCE, START, END, length_penalty_alpha=alpha)
    with pytest.raises(ValueError, match=expected):
        SequenceGenerator(seq2seq, "beam", length_penalty_alpha=alpha, max_length=4)


def teacher_forced_log_prob(model, source, target):
    """Summed log-probabilities of `target` (end included) from one full pass.

    The pass reads the whole row, what follows its end too: every row is
    then one shape (one compilation on JAX), and the decoder is causal, so
    the positions up to the end see only what precedes them.
    """
    ends = np.flatnonzero(target == END)
    length = ends[0] + 1 if len(ends) else len(target)
    decoder_tokens = np.concatenate([[START], target[:-1]])[None]
    logits = model({"encoder_tokens": source[None], "decoder_tokens": decoder_tokens})
    logits = np.asarray(keras.ops.convert_to_numpy(logits), "float64")[0]
    logits[:, [PAD, START]] = -np.inf  # never generated
    log_probs = logits - np.log(np.sum(np.exp(logits), axis=-1, keepdims=True))
    return np.sum(log_probs[np.arange(length), target[:length]]), length


def test_largest_alpha_keeps_scores_finite_and_ordered(seq2seq):
    alpha = 10.0
    generator = SequenceGenerator(
        seq2seq,
        sampler=BeamSampler(num_beams=3, length_penalty_alpha=alpha),
        max_length=8,
    )
    result = generator.generate(SOURCE)
    scores = result["beam_scores"]
    assert np.all(scores < 0.0), scores  # not the -0.0 of an overflowed penalty
    assert np.all(np.diff(scores, axis=1) <= 0.0), scores  # best first
    for row in range(len(SOURCE)):
        log_prob, length = teacher_forced_log_prob(
            seq2seq, SOURCE[row], result["tokens"][row]
        )
        expected = log_prob / ((5.0 + length) / 6.0) ** alpha
        np.testing.assert_allclose(result["scores"][row], expected, rtol=1e-4)


# === max_length and the model's positions ===


def test_max_length_beyond_the_model_is_refused(seq2seq, learned, lm):
    # Sinusoids: the longest source (64) plus the paper's 50.
    with pytest.raises(ValueError, match=r"max_length=10000") as info:
        SequenceGenerator(seq2seq, "greedy", max_length=10000)
    assert "max_sequence_length + 50=114" in str(info.value)
    SequenceGenerator(seq2seq, "greedy", max_length=114)  # the limit itself
    with pytest.raises(ValueError, match="max_sequence_length=16.*max_length=17"):
        SequenceGenerator(learned, "greedy", max_length=17)
    with pytest.raises(ValueError, match="max_sequence_length=16.*max_length=17"):
        greedy_search(learned, SOURCE, START, END, max_length=17)
    with pytest.raises(ValueError, match="max_sequence_length=64.*max_length=10000"):
        SequenceGenerator(lm, sampler="greedy", max_length=10000)
    with pytest.raises(ValueError, match="max_sequence_length=64.*max_length=65"):
        generate_lm(lm, SOURCE, 65)


def test_default_max_length_stops_at_the_learned_positions(learned):
    result = greedy_search(learned, SOURCE, START, END)
    assert result["tokens"].shape == (3, 16)  # not 4 + 50


def test_source_longer_than_the_learned_positions_is_refused(learned):
    source = np.full((2, 17), 5, "int32")
    expected = r"longer than the model's max_sequence_length=16.*shape=\(2, 17\)"
    with pytest.raises(ValueError, match=expected):
        SequenceGenerator(learned, "greedy", max_length=4).generate(source)
    with pytest.raises(ValueError, match=expected):
        greedy_search(learned, source, START, END, max_length=4)


def test_prompt_longer_than_the_model_or_max_length_is_refused(lm):
    with pytest.raises(
        ValueError, match=r"longer than the model's max length.*\(1, 70\)"
    ):
        generate_lm(lm, np.full((1, 70), 5, "int32"), 64)
    generator = SequenceGenerator(lm, sampler="greedy", max_length=6)
    with pytest.raises(ValueError, match="at least the prompt length 8.*max_length=6"):
        generator.generate(np.full((1, 8), 5, "int32"))


def test_lm_generator_serves_every_prompt_width(lm):
    # TensorFlow retraced a second width as `(batch, None)` and failed.
    generator = SequenceGenerator(lm, sampler="greedy", end_id=END, max_length=7)
    for prompts in (
        np.array([[5, 6]], "int32"),
        np.array([[5, 6, 7, 8, 0], [9, 10, 0, 0, 0]], "int32"),
    ):
        expected = generate_lm(lm, prompts, 7, end_id=END)
        result = generator.generate(prompts)
        np.testing.assert_array_equal(result["tokens"], np.asarray(expected["tokens"]))
        np.testing.assert_allclose(
            result["scores"], np.asarray(expected["scores"]), atol=1e-5
        )


# === Batches that disagree ===


def test_encoder_and_decoder_batches_must_agree(seq2seq):
    inputs = {
        "encoder_tokens": np.ones((3, 4), "int32"),
        "decoder_tokens": np.ones((2, 4), "int32"),
    }
    expected = r"must have the same batch size.*\(2, 4\).*\(3, 4\)"
    with pytest.raises(ValueError, match=expected):
        seq2seq(inputs)
    with pytest.raises(ValueError, match=expected):
        seq2seq.predict(inputs, verbose=0)
    with pytest.raises(ValueError, match=expected):
        seq2seq.predict_on_batch(inputs)


# === A generator built inside a MirroredStrategy scope ===

MIRRORED_SCRIPT = textwrap.dedent(
    """
    import tensorflow as tf

    cpu = tf.config.list_physical_devices("CPU")[0]
    tf.config.set_logical_device_configuration(
        cpu, [tf.config.LogicalDeviceConfiguration()] * 2
    )
    import keras
    import numpy as np

    from keras_attn.generation import RandomSampler, SequenceGenerator
    from keras_attn.models import Transformer

    source = np.array([[5, 6, 7, 3], [4, 9, 3, 0], [8, 8, 8, 3]], "int32")
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset("transformer_tiny", vocabulary_size=24, num_layers=1)
    samplers = ["greedy", RandomSampler(seed=1)]
    single = [
        SequenceGenerator(model, sampler=s, max_length=4).generate(source)
        for s in samplers
    ]
    devices = [d.name for d in tf.config.list_logical_devices("CPU")]
    with tf.distribute.MirroredStrategy(devices).scope():
        mirrored = [
            SequenceGenerator(model, sampler=s, max_length=4).generate(source)
            for s in samplers
        ]
    for one, many in zip(single, mirrored):
        assert sorted(one) == sorted(many), (one, many)
        for name in one:
            assert many[name].shape == one[name].shape, (name, many[name].shape)
            np.testing.assert_allclose(many[name], one[name], atol=1e-5)
    print("rows in == rows out")
    """
)


@pytest.mark.split_backend("torch")
def test_generator_in_a_mirrored_strategy_scope_keeps_the_batch(tmp_path):
    # tf.distribute runs TensorFlow whatever this process's backend; logical
    # devices must be set before TensorFlow's first op: a subprocess. Side by
    # side it runs from the torch suite, the shortest.
    script = tmp_path / "mirrored.py"
    script.write_text(MIRRORED_SCRIPT)
    env = dict(
        os.environ,
        KERAS_BACKEND="tensorflow",
        PYTHONPATH=REPO_ROOT + os.pathsep + os.environ.get("PYTHONPATH", ""),
        TF_CPP_MIN_LOG_LEVEL="2",
    )
    completed = subprocess.run(
        [sys.executable, str(script)],
        env=env,
        capture_output=True,
        text=True,
        timeout=600,
    )
    assert completed.returncode == 0, completed.stderr[-3000:]
    assert "rows in == rows out" in completed.stdout
