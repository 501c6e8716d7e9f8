"""Every batch splits evenly over the data-parallel replicas, or fit stops.

The two engines disagree on a batch that the replicas do not divide: JAX
cannot shard it (an `IndivisibleError`), and `tf.distribute` gives
replicas unequal shares, trains some such batches and fails on others (a
batch of 6 on 4 replicas is split `[2, 2, 2, 0]` and Keras's first step
fails in `AddN`). keras-attn refuses such a batch on both, with one message
naming its size and the replica count: at `check_batch_size` before
training, and, for what gets past that (a last partial batch), where the
batch enters the distribution.
"""


def uneven_batch_message(rows, num_replicas):
    """The message for a batch of `rows` rows on `num_replicas` replicas."""
    return (
        f"A batch of {rows} rows does not split evenly over the {num_replicas} "
        "data-parallel replicas: every batch, the last one included, must hold "
        f"a multiple of {num_replicas} rows (JAX cannot shard it; tf.distribute "
        "would give the replicas unequal shares). Use a batch size and a number "
        f"of examples that are multiples of {num_replicas}, or drop the last "
        "partial batch (`dataset.batch(batch_size, drop_remainder=True)`)."
    )


def check_rows(rows, num_replicas):
    """Raises `ValueError` unless `rows` splits over `num_replicas`."""
    if rows is not None and num_replicas > 1 and rows % num_replicas:
        raise ValueError(uneven_batch_message(rows, num_replicas))


def check_dataset_batches(dataset, num_replicas):
    """`dataset`, checked to yield batches that split over `num_replicas`.

    A batch size fixed in the dataset's `element_spec` is checked now
    (`ValueError`). Otherwise every batch is checked in the input pipeline
    as it is read: a batch that does not split raises
    `tf.errors.InvalidArgumentError` with `uneven_batch_message`, before the
    step that would use it.
    """
    import tensorflow as tf

    if num_replicas <= 1:
        return dataset
    spec = dataset.element_spec
    leaves = tf.nest.flatten(spec)
    shape = getattr(leaves[0], "shape", None) if leaves else None
    if shape is None or shape.rank in (None, 0):
        return dataset  # not batched, or of unknown rank: nothing to check
    rows = tf.compat.dimension_value(shape[0])
    if rows is not None:
        check_rows(rows, num_replicas)
        return dataset
    template = uneven_batch_message("{}", num_replicas)

    def checked(*element):
        # tf.data passes a tuple element as separate arguments.
        structure = element if isinstance(spec, tuple) else element[0]
        leaf = tf.nest.flatten(structure)[0]
        if isinstance(leaf, tf.RaggedTensor):
            rows = leaf.nrows(out_type=tf.int64)
        else:
            rows = tf.shape(leaf, out_type=tf.int64)[0]
        check = tf.debugging.Assert(
            tf.equal(rows % num_replicas, 0), [tf.strings.format(template, rows)]
        )
        with tf.control_dependencies([check]):
            return tf.nest.map_structure(tf.identity, structure)

    return dataset.map(checked)
