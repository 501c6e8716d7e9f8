"""Batches that hold each example twice, for R-Drop's two dropout passes."""

import tensorflow as tf

from keras_attn.validation import check_int


def repeat_batches(dataset, copies=2):
    """Stacks `copies` copies of every batch of a `(inputs, labels)` dataset.

    Each element `(inputs, labels)` becomes one whose batch axis holds the
    batch `copies` times over, `[x; x]`: one forward pass then runs every
    example through independent dropout masks, as R-Drop needs
    (`keras_attn.training.RDropLoss` reads the halves as the two passes).
    `inputs` may be a tensor or a dict of tensors, and shapes stay static
    where they were, so XLA compiles as many programs as before.

    Args:
        dataset: a batched `tf.data.Dataset` of `(inputs, labels)` pairs,
            e.g. from `make_translation_dataset`.
        copies: int `>= 1`, how many times each batch is stacked. Defaults
            to `2`.

    Returns:
        A `tf.data.Dataset` with batches `copies` times as large.

    Example:

    >>> import tensorflow as tf
    >>> data = tf.data.Dataset.from_tensors(({"x": tf.constant([[1, 2]])},
    ...                                      tf.constant([[3, 4]])))
    >>> repeated = keras_attn.text.repeat_batches(data)
    >>> inputs, labels = next(iter(repeated))
    >>> labels.numpy().tolist()
    [[3, 4], [3, 4]]
    """
    copies = check_int(copies, "copies", min_value=1)

    def stack(tensor):
        return tf.concat([tensor] * copies, axis=0)  # (copies * batch, ...)

    return dataset.map(
        lambda inputs, labels: (tf.nest.map_structure(stack, inputs), stack(labels)),
        num_parallel_calls=tf.data.AUTOTUNE,
        deterministic=True,
    )
