"""A callback that keys a tf.data pipeline's shuffle order to the epoch."""

import keras
import tensorflow as tf


class EpochSeededShuffle(keras.callbacks.Callback):
    """Tells a pipeline which epoch `fit` is in, so its order is reproducible.

    `tf.data`'s reshuffle-each-pass order depends on how many passes the
    dataset object has made, so a run restarted by `BackupAndRestore` at
    epoch `k` would replay epoch 0's order. Give this callback to both
    `make_translation_dataset(..., shuffle_epoch=callback)` and
    `model.fit(..., callbacks=[callback])`: every pass then shuffles with
    `(seed, epoch)` as its key, and a resumed run sees exactly the batches
    an uninterrupted one would.

    Attributes:
        epoch: the epoch as a scalar int64 `tf.Variable`, set at the start of
            every epoch; pipelines read it when a pass begins.

    Example:

    ```python
    shuffle = keras_attn.text.EpochSeededShuffle()
    data = keras_attn.text.make_translation_dataset(
        sources, targets, tokenizer, seed=0, shuffle_epoch=shuffle
    )
    model.fit(data, epochs=10, callbacks=[shuffle, backup])
    ```
    """

    def __init__(self):
        super().__init__()
        # Created outside any distribution scope: tf.data owns it, not a model.
        with tf.init_scope():
            self.epoch = tf.Variable(0, dtype=tf.int64, trainable=False)

    def on_epoch_begin(self, epoch, logs=None):
        self.epoch.assign(epoch)
