"""`model.fit` on the torch backend from the inputs a torch user reaches for.

A tf.data pipeline (what `keras_attn.text` builds), a `keras.utils.PyDataset`
and a `torch.utils.data.DataLoader` each train a tiny Transformer for one
epoch: a finite loss, and the same weights as `fit` on the same batches
given as NumPy arrays (the input path changes nothing but the source).
"""

import keras
import numpy as np
import pytest

from keras_attn.models import Transformer
from keras_attn.training import MaskedSparseCategoricalCrossentropy

pytestmark = pytest.mark.skipif(
    keras.backend.backend() != "torch", reason="torch backend only"
)

VOCABULARY_SIZE, BATCH_SIZE, NUM_BATCHES = 20, 4, 2


def batches():
    """`NUM_BATCHES` batches of (inputs dict, labels) with end padding."""
    rng = np.random.default_rng(0)
    out = []
    for _ in range(NUM_BATCHES):
        tokens = rng.integers(4, VOCABULARY_SIZE, (3, BATCH_SIZE, 6)).astype("int32")
        tokens[:, 0, 4:] = 0  # padding in the first row
        inputs = {"encoder_tokens": tokens[0], "decoder_tokens": tokens[1]}
        out.append((inputs, tokens[2]))
    return out


def trained_weights(data, **fit_kwargs):
    keras.utils.set_random_seed(0)
    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, dropout=0.0
    )
    model.compile(optimizer="adam", loss=MaskedSparseCategoricalCrossentropy())
    history = model.fit(data, epochs=1, verbose=0, shuffle=False, **fit_kwargs)
    assert np.isfinite(history.history["loss"][-1])
    return model.get_weights()


class Batches(keras.utils.PyDataset):
    def __init__(self, items):
        super().__init__()
        self.items = items

    def __len__(self):
        return len(self.items)

    def __getitem__(self, index):
        return self.items[index]


@pytest.fixture(scope="module")
def reference():
    """Weights after `fit` on the same batches as NumPy (no shuffling)."""
    items = batches()
    inputs = {key: np.concatenate([x[key] for x, _ in items]) for key in items[0][0]}
    labels = np.concatenate([y for _, y in items])
    return trained_weights(inputs, y=labels, batch_size=BATCH_SIZE)


def assert_same_weights(weights, reference):
    for ours, theirs in zip(weights, reference):
        np.testing.assert_allclose(ours, theirs, rtol=1e-5, atol=1e-6)


def test_fit_from_tf_data(reference):
    import tensorflow as tf

    items = batches()
    dataset = tf.data.Dataset.from_generator(
        lambda: iter(items),
        output_signature=(
            {
                "encoder_tokens": tf.TensorSpec((None, None), tf.int32),
                "decoder_tokens": tf.TensorSpec((None, None), tf.int32),
            },
            tf.TensorSpec((None, None), tf.int32),
        ),
    )
    assert_same_weights(trained_weights(dataset), reference)


def test_fit_from_py_dataset(reference):
    assert_same_weights(trained_weights(Batches(batches())), reference)


def test_fit_from_torch_data_loader(reference):
    import torch

    class TokenPairs(torch.utils.data.Dataset):
        """One example per item; the `DataLoader` collates them into batches."""

        def __init__(self, items):
            self.examples = [
                ({key: x[key][row] for key in x}, y[row])
                for x, y in items
                for row in range(len(y))
            ]

        def __len__(self):
            return len(self.examples)

        def __getitem__(self, index):
            return self.examples[index]

    loader = torch.utils.data.DataLoader(
        TokenPairs(batches()), batch_size=BATCH_SIZE, shuffle=False
    )
    assert_same_weights(trained_weights(loader), reference)
