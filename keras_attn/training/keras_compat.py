"""The two places where keras-attn relies on Keras behaviour no API names.

Each is used in one place, and `tests/training/test_keras_compat.py` fails
loudly if a Keras release changes the behaviour:

- `set_initial_epoch`: a callback cannot tell `fit` which epoch to start
  from through public API. `keras.callbacks.BackupAndRestore` itself sets
  the trainer's `_initial_epoch`, which every backend's `fit` reads; our
  `AtomicBackupAndRestore` does the same, here only.
- `drop_keras_mask`: `keras.losses.Loss.__call__` rescales the loss by a
  Keras mask it finds on `y_pred` (from an `Embedding(mask_zero=True)`),
  and there is no public way to remove a mask. A new tensor object
  carries none: a reshape to the same shape (a view on torch, no work
  under XLA), or a copy should a backend ever hand the same object back.
"""

import keras


def set_initial_epoch(model, epoch):
    """Makes the next `model.fit` start at `epoch`, as `BackupAndRestore` does."""
    if not hasattr(model, "_initial_epoch"):
        raise RuntimeError(
            "This Keras version's trainer has no `_initial_epoch`: "
            "keras_attn.training.AtomicBackupAndRestore can not resume. "
            f"Keras {keras.__version__}; see keras_attn/training/keras_compat.py."
        )
    model._initial_epoch = epoch


def drop_keras_mask(tensor):
    """`tensor`'s values without the Keras mask propagated with it.

    Keras keeps a mask on the tensor object (an attribute, or an entry by
    `id`). The copy this once always made cost eager torch a pass over the
    whole `(batch, length, vocabulary)` logits every training step.
    """
    fresh = keras.ops.reshape(tensor, keras.ops.shape(tensor))
    if fresh is tensor:
        fresh = keras.ops.copy(tensor)
    return fresh
