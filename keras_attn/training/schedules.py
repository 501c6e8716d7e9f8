"""The learning-rate schedule of "Attention Is All You Need" (section 5.3)."""

import keras

from keras_attn.validation import check_positive_float, check_positive_int


@keras.saving.register_keras_serializable(package="keras_attn")
class TransformerSchedule(keras.optimizers.schedules.LearningRateSchedule):
    """Linear warmup, then inverse-square-root decay (the paper's schedule).

    Implements equation (3) of section 5.3:

    ```
    lrate = scale * d_model^-0.5 * min(step_num^-0.5, step_num * warmup_steps^-1.5)
    ```

    The rate grows linearly for the first `warmup_steps` steps, peaks at
    `scale * (d_model * warmup_steps)^-0.5` when `step_num == warmup_steps`,
    and then decays proportionally to the inverse square root of the step.

    The paper counts steps from 1, while Keras optimizers call their schedule
    with `optimizer.iterations`, which is 0 for the first update. The schedule
    therefore evaluates the formula at `step_num = step + 1`: the first update
    uses the paper's `step_num = 1` (and never divides by zero), and
    `schedule(warmup_steps - 1)` is the peak.

    Args:
        d_model: Positive integer, the model (embedding) width. The paper's
            base model uses 512 and the big model 1024.
        warmup_steps: Positive integer, the number of linear-warmup steps.
            Defaults to `4000`, the value used in the paper.
        scale: Positive float multiplying the whole rate, for tuning the
            peak without changing the shape. Defaults to `1.0` (the paper).

    Call arguments:
        step: Integer scalar tensor, the 0-based optimizer step (what Keras
            optimizers pass).

    Returns:
        A float32 scalar tensor, the learning rate for that step.

    Example:

    >>> schedule = keras_attn.training.TransformerSchedule(d_model=512)
    >>> optimizer = keras.optimizers.Adam(
    ...     learning_rate=schedule, beta_1=0.9, beta_2=0.98, epsilon=1e-9
    ... )
    >>> float(schedule(3999))  # The peak: 512**-0.5 * 4000**-0.5.
    0.000698...

    References:
        - [Vaswani et al., 2017, "Attention Is All You Need", section 5.3](
          https://arxiv.org/abs/1706.03762)
    """

    def __init__(self, d_model, warmup_steps=4000, scale=1.0):
        self.d_model = check_positive_int(d_model, "d_model")
        self.warmup_steps = check_positive_int(warmup_steps, "warmup_steps")
        self.scale = check_positive_float(scale, "scale")

    def __call__(self, step):
        # Shift Keras's 0-based `iterations` to the paper's 1-based step_num.
        step_num = keras.ops.cast(step, "float32") + 1.0
        rate = keras.ops.minimum(
            keras.ops.rsqrt(step_num), step_num * self.warmup_steps**-1.5
        )
        return (self.scale * self.d_model**-0.5) * rate

    def get_config(self):
        # `LearningRateSchedule.get_config` only raises NotImplementedError,
        # so there is no parent config to chain to.
        return {
            "d_model": self.d_model,
            "warmup_steps": self.warmup_steps,
            "scale": self.scale,
        }
