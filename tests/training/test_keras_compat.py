"""Fails loudly when Keras changes what `keras_attn.training.keras_compat`
relies on (no public API does either job; see that module)."""

import keras
import numpy as np

from keras_attn.training.keras_compat import drop_keras_mask, set_initial_epoch


class CountEpochs(keras.callbacks.Callback):
    def __init__(self):
        super().__init__()
        self.epochs = []

    def on_epoch_begin(self, epoch, logs=None):
        self.epochs.append(epoch)


def test_fit_starts_at_the_epoch_set():
    model = keras.Sequential([keras.Input((2,)), keras.layers.Dense(1)])
    model.compile(optimizer="sgd", loss="mse")
    set_initial_epoch(model, 2)
    counter = CountEpochs()
    model.fit(
        np.ones((4, 2)), np.ones((4, 1)), epochs=4, verbose=0, callbacks=[counter]
    )
    assert counter.epochs == [2, 3]


def test_losses_rescale_by_a_mask_on_y_pred_and_the_copy_drops_it():
    ids = np.array([[1, 2, 0, 0]])
    y_pred = keras.layers.Embedding(3, 1, mask_zero=True)(ids)  # (1, 4, 1), masked
    y_true = keras.ops.zeros_like(y_pred)
    loss = keras.losses.MeanSquaredError()
    squares = np.asarray(keras.ops.convert_to_numpy(y_pred))[0, :, 0] ** 2
    # Keras reads the mask from `y_pred`: the mean over the 2 real tokens.
    np.testing.assert_allclose(
        float(loss(y_true, y_pred)), squares[:2].mean(), rtol=1e-6
    )
    # Without it, the mean over all 4.
    unmasked = float(loss(y_true, drop_keras_mask(y_pred)))
    np.testing.assert_allclose(unmasked, squares.mean(), rtol=1e-6)
