"""torch's global random-number state, which unseeded Keras dropout draws from.

On JAX and TensorFlow every dropout mask comes from a
`keras.random.SeedGenerator`, a variable of the model that a backup saves
and restores. On torch, Keras's `dropout` with an unseeded generator (the
default of `keras.layers.Dropout` and of keras-attn's dropout layers) calls
`torch.nn.functional.dropout`, which draws from torch's global generators:
a resumed run restores the `SeedGenerator`s but draws other masks unless
torch's own state is restored too. Keras has no API for that state, so this
module (the one piece of torch in `keras_attn/training`) reads and writes it.
"""

import keras

_CPU_STATE_BYTES = 5056  # torch's CPU generator (Mersenne Twister) state


def get_torch_random_state():
    """torch's global generator states as JSON-ready lists of byte values.

    Returns:
        `None` on a backend other than torch; else a dict with `"cpu"`, the
        CPU generator's state, and `"cuda"`, one state per CUDA device when
        CUDA has been initialized (else an empty list).
    """
    if keras.backend.backend() != "torch":
        return None
    import torch

    cuda = []
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        cuda = [state.tolist() for state in torch.cuda.get_rng_state_all()]
    return {"cpu": torch.get_rng_state().tolist(), "cuda": cuda}


def check_torch_random_state(state):
    """Checks a state read back from a file (no torch needed).

    Args:
        state: `None`, or what `get_torch_random_state` returned: `"cpu"`
            a list of 5,056 integers in `[0, 255]`, `"cuda"` a list of
            lists of such integers.

    Raises:
        ValueError: for a `state` of another form, naming what was expected.
    """
    if state is None:
        return
    if not isinstance(state, dict) or set(state) != {"cpu", "cuda"}:
        raise ValueError(
            'expected a JSON object with the keys "cpu" and "cuda"; '
            f"received {type(state).__name__} {state!r:.100}"
        )
    _check_bytes(state["cpu"], '"cpu"')
    if len(state["cpu"]) != _CPU_STATE_BYTES:
        raise ValueError(
            f'"cpu" must hold {_CPU_STATE_BYTES} bytes; received {len(state["cpu"])}'
        )
    if not isinstance(state["cuda"], list):
        raise ValueError(f'"cuda" must be a list; received {state["cuda"]!r:.100}')
    for device in state["cuda"]:
        _check_bytes(device, '"cuda" entries')


def set_torch_random_state(state):
    """Restores what `get_torch_random_state` returned.

    Does nothing on a backend other than torch, or for `state=None` (a
    backup written on another backend). CUDA states are restored when
    their number matches this machine's CUDA devices.

    Args:
        state: the dict from `get_torch_random_state` (checked first, see
            `check_torch_random_state`).

    Raises:
        ValueError: for a `state` of another form.
    """
    check_torch_random_state(state)
    if state is None or keras.backend.backend() != "torch":
        return
    import torch

    torch.set_rng_state(torch.tensor(state["cpu"], dtype=torch.uint8))
    cuda = [torch.tensor(device, dtype=torch.uint8) for device in state["cuda"]]
    if cuda and torch.cuda.is_available() and len(cuda) == torch.cuda.device_count():
        torch.cuda.set_rng_state_all(cuda)


def _check_bytes(values, what):
    if not isinstance(values, list) or not all(
        isinstance(v, int) and not isinstance(v, bool) and 0 <= v <= 255 for v in values
    ):
        raise ValueError(
            f"{what} must be a list of integers in [0, 255]; received {values!r:.100}"
        )
