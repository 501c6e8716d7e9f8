"""One lock per model for Keras's predict calls made from several threads.

On JAX, Keras's `Model.predict_on_batch` and `Model.predict` may not run on
one set of variables from two threads at once. Each call reads the value of
every variable, hands the values to a `jax.jit` function that donates them
(`donate_argnums=0`: their buffers are freed and reused for the outputs)
and assigns the returned values back to the variables (`predict` also
detaches the values from the variables while it runs). A second thread that
read the values before the first assigned them back passes freed buffers:
"Buffer has been deleted or donated". Public Keras has no way to call a
compiled predict function without donation, so the calls are serialized.

On every backend, a call that advances a random state (a sampler's
`keras.random.SeedGenerator`) reads the state and writes the next one; two
such calls at once could read the same state and draw the same numbers.
TensorFlow and torch otherwise only read the weights in inference, so calls
that advance no state run there concurrently, without a lock.

The lock belongs to the model whose variables are shared, so every caller
that holds it is serialized with every other: two `SequenceGenerator`s over
one model (a `TextGenerator` keeps one per sampler), a `Translator` and a
`TextClassifier` sharing nothing but threads. Calls made on the model
without `predict_lock` (the user's own `model.predict` in another thread)
are not serialized with them.
"""

import contextlib
import threading
import weakref

import keras

# Keyed by the model itself, held weakly: a model's lock goes with it.
_MODEL_LOCKS = weakref.WeakKeyDictionary()
_REGISTRY_LOCK = threading.Lock()


def model_lock(model):
    """The re-entrant lock of `model`, the same object on every call."""
    with _REGISTRY_LOCK:
        lock = _MODEL_LOCKS.get(model)
        if lock is None:
            lock = _MODEL_LOCKS[model] = threading.RLock()
        return lock


def predict_lock(model, advances_state=False):
    """What a predict call on `model`'s variables holds while it runs.

    Args:
        model: the `keras.Model` whose variables the call reads.
        advances_state: bool, whether the call writes a state variable (a
            random sampler's seed). Defaults to `False`.

    Returns:
        `model_lock(model)` on JAX, or on any backend when the call advances
        a state; otherwise a null context (TensorFlow and torch run
        read-only calls concurrently).
    """
    if advances_state or keras.backend.backend() == "jax":
        return model_lock(model)
    return contextlib.nullcontext()
