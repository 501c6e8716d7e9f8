"""`even_batches`: a batch that the replicas do not divide is refused by name.

The check is tf.data code, the same under JAX's `DataParallel` and
TensorFlow's `MirroredStrategy` (the workers of test_jax_distribution.py and
test_tf_distribution.py run it inside `fit`); here it runs on one device,
on every backend (tf.data runs beside any of them).
"""

import numpy as np
import pytest
import tensorflow as tf

from keras_attn.distribution.even_batches import (
    check_dataset_batches,
    uneven_batch_message,
)


def _batches(rows, batch_size, drop_remainder=False):
    tokens = np.arange(rows * 3, dtype="int32").reshape(rows, 3)
    dataset = tf.data.Dataset.from_tensor_slices(({"tokens": tokens}, tokens[:, 0]))
    return dataset.batch(batch_size, drop_remainder=drop_remainder)


def test_a_fixed_batch_size_is_checked_at_once():
    # Keras's arrays of 12 rows in batches of 6 have a static batch size.
    with pytest.raises(ValueError, match="A batch of 6 rows does not split evenly"):
        check_dataset_batches(_batches(12, 6, drop_remainder=True), 4)
    dataset = _batches(16, 8, drop_remainder=True)
    assert check_dataset_batches(dataset, 4) is dataset


def test_a_last_partial_batch_is_refused_when_read():
    checked = check_dataset_batches(_batches(18, 8), 4)  # 8, 8, 2
    iterator = iter(checked)
    for _ in range(2):
        inputs, labels = next(iterator)  # the structure is kept
        assert inputs["tokens"].shape == (8, 3) and labels.shape == (8,)
    with pytest.raises(tf.errors.InvalidArgumentError) as error:
        next(iterator)
    assert uneven_batch_message(2, 4) in str(error.value)


def test_even_batches_and_one_replica_pass_unchanged():
    checked = check_dataset_batches(_batches(20, 8), 4)  # 8, 8, 4
    assert [int(labels.shape[0]) for _, labels in checked] == [8, 8, 4]
    dataset = _batches(5, 2)
    assert check_dataset_batches(dataset, 1) is dataset


def test_the_message_names_the_rows_the_replicas_and_the_way_out():
    message = uneven_batch_message(6, 4)
    assert message.startswith(
        "A batch of 6 rows does not split evenly over the 4 data-parallel replicas"
    )
    assert "drop_remainder=True" in message
