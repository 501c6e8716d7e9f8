"""The tiny encoder-decoder the generation tests decode with."""

import keras

from keras_attn.models import Transformer

VOCABULARY_SIZE, PAD, START, END = 24, 0, 2, 3


def make_model(end_bias=0.0):
    """`transformer_tiny` over 24 ids with one layer, seeded, with the end
    id's logit bias set to `end_bias` (a large one ends every row at once).

    One layer: what these tests compare (compiled and eager loops, the
    processors' effect) holds for any depth, and every layer is more to
    compile; the cache against full passes, over two layers, is
    `test_greedy_search.py`'s and `test_beam_search.py`'s.
    """
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "transformer_tiny",
        vocabulary_size=VOCABULARY_SIZE,
        tie_embeddings=False,
        num_layers=1,
    )
    kernel, bias = model.get_layer("logits").get_weights()
    bias[END] = end_bias
    model.get_layer("logits").set_weights([kernel, bias])
    return model
