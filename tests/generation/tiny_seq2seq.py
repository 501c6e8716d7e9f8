"""The tiny encoder-decoder the generation tests decode with."""

import keras

from keras_attn.models import Transformer

VOCABULARY_SIZE, PAD, START, END = 24, 0, 2, 3


def make_model(end_bias=0.0):
    """`transformer_tiny` over 24 ids, seeded, with the end id's logit bias
    set to `end_bias` (a large one ends every row at once)."""
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, tie_embeddings=False
    )
    kernel, bias = model.get_layer("logits").get_weights()
    bias[END] = end_bias
    model.get_layer("logits").set_weights([kernel, bias])
    return model
