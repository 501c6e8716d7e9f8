"""Untrained tiny models with a real tokenizer, and the files they leave.

Shared by the tests that read a preset or a run directory of the
translation recipe (`save-preset`, `translate`) without paying for a
training run.
"""

import dataclasses
import json

import keras

from keras_attn.models import Transformer
from keras_attn.text import SubwordTokenizer, load_multi30k
from keras_attn_recipes.translation_config import SETTINGS


def untrained_model_and_tokenizer(model_class=Transformer, preset="transformer_tiny"):
    """`(model, tokenizer)`: a 120-piece SentencePiece model of Multi30k val
    and an untrained `model_class` preset of its vocabulary size (seed 0)."""
    sources, targets = load_multi30k("val")
    tokenizer = SubwordTokenizer.train(sources[:200] + targets[:200], 120)
    keras.utils.set_random_seed(0)
    model = model_class.from_preset(preset, vocabulary_size=tokenizer.vocabulary_size)
    return model, tokenizer


def write_untrained_run(directory, epochs=1):
    """Writes tokenizer, config, `epochs` checkpoints and `model.keras`.

    Each checkpoint's weights differ (the initial ones plus 0.01 per epoch),
    so averaging them is visible. Returns the `model` saved last.
    """
    model, tokenizer = untrained_model_and_tokenizer()
    tokenizer.save(directory / "tokenizer")
    config = SETTINGS["tiny"].replace(vocabulary_size=tokenizer.vocabulary_size)
    (directory / "config.json").write_text(json.dumps(dataclasses.asdict(config)))
    (directory / "training.json").write_text(json.dumps({"updates": 7}))
    (directory / "checkpoints").mkdir()
    for epoch in range(1, epochs + 1):
        if epochs > 1:
            model.set_weights([w + 0.01 * epoch for w in model.get_weights()])
        model.save(directory / "checkpoints" / f"epoch_{epoch:03d}.keras")
    model.save(directory / "model.keras")
    return model
