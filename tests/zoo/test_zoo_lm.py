"""TransformerLM: serialization, causality, cached steps equal one full pass."""

import json

import keras
import numpy as np
import pytest

from keras_attn.models import TransformerLM

VOCABULARY_SIZE = 30
TOKENS = np.array(
    [[2, 5, 6, 7, 8, 9, 10, 11], [2, 12, 13, 14, 15, 16, 17, 18]], "int32"
)


def make_model(**overrides):
    keras.utils.set_random_seed(0)
    return TransformerLM.from_preset(
        "lm_tiny", vocabulary_size=VOCABULARY_SIZE, **overrides
    )


VARIANTS = {
    "gpt_pre_norm_tied_learned": {},
    "post_norm_untied_sinusoidal": {
        "normalize_first": False,
        "tie_embeddings": False,
        "position": "sinusoidal",
    },
}


@pytest.fixture(scope="module", params=sorted(VARIANTS))
def model(request):
    return make_model(**VARIANTS[request.param])


def test_config_and_keras_file_round_trip(model, tmp_path):
    config = model.get_config()
    json.dumps(config)
    assert TransformerLM.from_config(config).get_config() == config
    path = tmp_path / "lm.keras"
    model.save(path)
    loaded = keras.saving.load_model(path)
    assert isinstance(loaded, TransformerLM)
    np.testing.assert_allclose(loaded(TOKENS), model(TOKENS), atol=1e-6)


def test_tied_model_has_no_separate_output_projection():
    tied, untied = make_model(), make_model(tie_embeddings=False)
    extra = 32 * VOCABULARY_SIZE + VOCABULARY_SIZE  # Dense(vocabulary) kernel + bias
    assert untied.count_params() - tied.count_params() == extra
    # Tied logits are the final hidden states times the transposed embedding.
    hidden = keras.Model(tied.input, tied.get_layer("output_norm").output)(TOKENS)
    embeddings = tied.token_embedding.token_embedding.embeddings
    expected = np.asarray(hidden) @ np.asarray(embeddings).T
    np.testing.assert_allclose(tied(TOKENS), expected, atol=1e-5)


@pytest.mark.parametrize("t", [0, 3, 6])
def test_logits_at_t_ignore_later_tokens(model, t):
    changed = TOKENS.copy()
    changed[:, t + 1 :] = np.random.default_rng(t).integers(
        1, VOCABULARY_SIZE, size=changed[:, t + 1 :].shape
    )
    original, perturbed = np.asarray(model(TOKENS)), np.asarray(model(changed))
    np.testing.assert_allclose(perturbed[:, : t + 1], original[:, : t + 1], atol=1e-5)
    assert not np.allclose(perturbed[:, t + 1 :], original[:, t + 1 :], atol=1e-3)


def test_cached_prefill_and_steps_equal_one_full_pass(model):
    full = np.asarray(model(TOKENS))
    cache = model.initial_cache(batch_size=2, max_length=10)
    prefill, cache = model.decode_step(TOKENS[:, :3], cache, 0)
    steps = [np.asarray(prefill)]
    for index in range(3, TOKENS.shape[1]):
        logits, cache = model.decode_step(TOKENS[:, index : index + 1], cache, index)
        steps.append(np.asarray(logits))
    np.testing.assert_allclose(np.concatenate(steps, axis=1), full, atol=1e-5)


def test_initial_cache_shapes_and_limits(model):
    cache = model.initial_cache(3, 12)
    assert len(cache["self_attention"]) == model.num_layers
    keys, values = cache["self_attention"][0]
    assert tuple(keys.shape) == (3, 12, model.num_heads, 32 // model.num_heads)
    limit = model.position_scheme.max_length
    if limit is not None:
        with pytest.raises(ValueError, match=f"max_length={limit + 1}"):
            model.initial_cache(1, limit + 1)


@pytest.mark.parametrize(
    "overrides, message",
    [
        ({"vocabulary_size": 0}, "vocabulary_size=0"),
        ({"num_layers": 0}, "num_layers=0"),
        ({"hidden_dim": 10, "num_heads": 4}, "hidden_dim=10, num_heads=4"),
        ({"pad_id": -1}, "pad_id=-1"),
    ],
)
def test_bad_arguments_name_argument_and_value(overrides, message):
    arguments = dict(
        vocabulary_size=VOCABULARY_SIZE,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=8,
    )
    arguments.update(overrides)
    with pytest.raises(ValueError, match=message):
        TransformerLM(**arguments)
