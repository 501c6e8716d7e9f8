"""The arguments that models share, checked in one place.

`ZooModel._check_model_arguments` checks every argument of
`zoo_model.MODEL_ARGUMENTS` that a constructor takes, the blocks'
arguments and `pad_id`: each model refuses a bad value with the same
message, and a constructor that takes an argument takes the dict form
of `position` too.
"""

import inspect

import numpy as np
import pytest

from keras_attn import models
from keras_attn.models import zoo_model

TINY = dict(num_layers=1, hidden_dim=8, num_heads=2, intermediate_dim=8, dropout=0.0)
BUILDERS = {
    "Transformer": lambda **kw: models.Transformer(
        **{"vocabulary_size": 11, **TINY, "max_sequence_length": 8, **kw}
    ),
    "TransformerLM": lambda **kw: models.TransformerLM(
        **{"vocabulary_size": 11, **TINY, "max_sequence_length": 8, **kw}
    ),
    "TransformerEncoderClassifier": lambda **kw: models.TransformerEncoderClassifier(
        **{
            "vocabulary_size": 11,
            "num_classes": 3,
            **TINY,
            "max_sequence_length": 8,
            **kw,
        }
    ),
    "VisionTransformer": lambda **kw: models.VisionTransformer(
        **{"num_classes": 3, "image_size": 4, "patch_size": 2, **TINY, **kw}
    ),
}
# A refused value of each argument the table checks, and of `pad_id`.
BAD_VALUES = {
    "vocabulary_size": 0,
    "max_sequence_length": "64",
    "position": "spiral",
    "normalize_first": "no",
    "tie_embeddings": 1,
    "scale_embeddings": None,
    "pad_id": 11,
    "num_heads": 3,
}


def takes(model, name):
    return name in inspect.signature(getattr(models, model).__init__).parameters


def test_the_table_holds_arguments_that_models_share():
    for name in zoo_model.MODEL_ARGUMENTS:
        assert sum(takes(model, name) for model in BUILDERS) >= 2, name
    assert set(zoo_model.MODEL_ARGUMENTS) | {"pad_id", "num_heads"} == set(BAD_VALUES)


@pytest.mark.parametrize("name", list(BAD_VALUES))
def test_every_model_refuses_a_shared_argument_with_one_message(name):
    messages = {}
    for model, build in BUILDERS.items():
        if not takes(model, name):
            continue
        with pytest.raises((TypeError, ValueError)) as info:
            build(**{name: BAD_VALUES[name]})
        messages[model] = (type(info.value), str(info.value))
    assert len(messages) >= 2
    assert len(set(messages.values())) == 1, messages
    assert f"{name}=" in next(iter(messages.values()))[1]


@pytest.mark.parametrize(
    "model", ["Transformer", "TransformerLM", "TransformerEncoderClassifier"]
)
def test_token_models_store_the_shared_arguments_as_attributes(model):
    position = {"name": "rotary", "max_wavelength": 500.0}
    built = BUILDERS[model](position=position, pad_id=1)
    assert built.position == position and built.position is not position
    assert built.position_scheme.max_wavelength == 500.0
    assert built.vocabulary_size == 11 and built.max_sequence_length == 8
    assert built.pad_id == 1
    config = built.get_config()
    assert config["position"] == position
    restored = type(built).from_config(config)
    assert restored.get_config() == config
    ids = np.ones((2, 5), "int32")
    inputs = (
        {"encoder_tokens": ids, "decoder_tokens": ids}
        if model == "Transformer"
        else ids
    )
    assert restored(inputs).shape[0] == 2
