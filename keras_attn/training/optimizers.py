"""The optimizer of "Attention Is All You Need" (section 5.3)."""

import keras

from keras_attn.training.schedules import TransformerSchedule


def paper_adam(learning_rate=None, d_model=512, warmup_steps=4000, **kwargs):
    """Returns Adam configured as in the paper, with its warmup schedule.

    The paper trains with Adam, `beta_1=0.9`, `beta_2=0.98`, `epsilon=1e-9`,
    and the learning rate of
    `keras_attn.training.TransformerSchedule(d_model, warmup_steps)`.

    Args:
        learning_rate: A float, or a
            `keras.optimizers.schedules.LearningRateSchedule`, used instead
            of the paper's schedule. Defaults to `None`, which means
            `TransformerSchedule(d_model, warmup_steps)`.
        d_model: Positive integer, the model width the schedule scales by.
            Ignored when `learning_rate` is given. Defaults to `512` (the
            base model).
        warmup_steps: Positive integer, the schedule's warmup steps. Ignored
            when `learning_rate` is given. Defaults to `4000`.
        **kwargs: Further `keras.optimizers.Adam` arguments (e.g.
            `clipnorm`, `global_clipnorm`, `name`). `beta_1`, `beta_2` and
            `epsilon` may be passed to override the paper's values.

    Returns:
        A `keras.optimizers.Adam` instance.

    Example:

    >>> optimizer = keras_attn.training.paper_adam(d_model=512)
    >>> optimizer.beta_2
    0.98

    References:
        - [Vaswani et al., 2017, "Attention Is All You Need", section 5.3](
          https://arxiv.org/abs/1706.03762)
    """
    if learning_rate is None:
        learning_rate = TransformerSchedule(d_model, warmup_steps=warmup_steps)
    kwargs.setdefault("beta_1", 0.9)
    kwargs.setdefault("beta_2", 0.98)
    kwargs.setdefault("epsilon", 1e-9)
    return keras.optimizers.Adam(learning_rate=learning_rate, **kwargs)
