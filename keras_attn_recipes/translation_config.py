"""Settings of the Multi30k translation recipe: plain data, overridable."""

import collections.abc
import dataclasses
import functools
import json
from pathlib import Path

# Settings that define the model, its tokenizer and its data: a run
# directory's checkpoints and backup hold that model, so a resumed `train`
# must keep them. The optimizer's schedule, the batching, the training
# length and evaluation may change on resume (e.g. a lower learning rate).
MODEL_SETTINGS = (
    "preset",
    "num_layers",
    "hidden_dim",
    "num_heads",
    "intermediate_dim",
    "dropout",
    "attention_dropout",
    "normalize_first",
    "position",
    "activation",
    "normalization",
    "num_key_value_heads",
    "use_bias",
    "vocabulary_size",
    "train_pairs",
    "max_length",
    "seed",
)

# Settings of the model's `attention` (`keras_attn.layers.AttentionSettings`):
# setting -> its field there.
ATTENTION_SETTINGS = {
    "attention_dropout": "dropout",
    "num_key_value_heads": "num_key_value_heads",
}

LEARNING_RATE_DECAYS = ("inverse_sqrt", "cosine")


@dataclasses.dataclass(frozen=True)
class TranslationConfig:
    """Everything one training run of `translate_multi30k.py` depends on.

    Model shape comes from `preset`; any field left `None` keeps the
    preset's value. Training length is counted in optimizer updates
    (`train_steps`), so a setting trains the same model on every machine;
    `epochs` (passes over the data) may be given instead, for short runs.
    `time_budget_minutes` is an optional safety stop, off by default.
    `steps_per_execution` is `compile`'s: Keras's host work (callbacks,
    state hand-over; on TensorFlow, the graph call) runs once per that many
    updates. It defaults to 1 because the update budget stops, and its log
    rows fall, at exact update counts only when it divides them (see
    `UpdateBudget`); the CPU step of the settings here is compute-bound
    (docs/performance.md, "Host time per step").
    """

    preset: str = "transformer_small"
    num_layers: int | None = None
    hidden_dim: int | None = None
    num_heads: int | None = None
    intermediate_dim: int | None = None
    dropout: float | None = None
    # Dropout on the attention weights (the `dropout` of the model's
    # `attention`); None keeps the preset's value.
    attention_dropout: float | None = None
    normalize_first: bool = False
    # The attention variants (docs/attention_variants.md); None keeps the
    # preset's value: `position` ("sinusoidal", "rotary", "relative", ...),
    # the feed-forward `activation` ("relu", "swiglu", ...),
    # `normalization` ("layer" or "rms"), grouped-query
    # `num_key_value_heads` (in the model's `attention`), `use_bias`.
    position: str | None = None
    activation: str | None = None
    normalization: str | None = None
    num_key_value_heads: int | None = None
    use_bias: bool | None = None
    vocabulary_size: int = 8000
    train_pairs: int | None = None  # None: all 29,000
    train_steps: int | None = None  # optimizer updates; or `epochs`
    epochs: int | None = None  # passes over the data; or `train_steps`
    time_budget_minutes: float | None = None  # a safety stop, off by default
    max_tokens_per_batch: int = 4096
    max_length: int = 128
    # Padded lengths of the length buckets below `max_length` (which is the
    # last); None: the pipeline's 8, 12, 16, 24, 32, 48, 64, 96. Finer
    # buckets waste less of each batch on padding and cost one compilation
    # of the training step each.
    bucket_lengths: list[int] | None = None
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    # "inverse_sqrt": the paper's schedule (warm-up, then 1/sqrt(step)).
    # "cosine": the same warm-up to the same peak, then a cosine decay to
    # zero at `train_steps` (Keras's `CosineDecay`): a short run ends at a
    # small rate instead of stopping half-way down the paper's curve.
    learning_rate_decay: str = "inverse_sqrt"
    label_smoothing: float = 0.1
    # Subword regularization: every epoch draws each training sentence's
    # segmentation from its `subword_nbest_size` best (1: the best, always),
    # with probability proportional to P(segmentation) ** subword_alpha
    # (`make_translation_dataset`). Validation and decoding use the best.
    subword_nbest_size: int = 1
    subword_alpha: float = 0.1
    # R-Drop (Liang et al., 2021): > 0 feeds every batch twice (so a batch
    # holds 2 * max_tokens_per_batch positions) and adds this weight times
    # the two passes' symmetric KL divergence to the loss (`RDropLoss`).
    r_drop_alpha: float = 0.0
    beam_size: int = 4
    length_penalty_alpha: float = 0.6
    average_checkpoints: int = 1  # `evaluate` averages the last N epochs
    steps_per_execution: int = 1  # updates per host round trip (`compile`)
    evaluation_pairs: int | None = None  # None: the whole split
    seed: int = 0

    def __post_init__(self):
        # Each field by its `keras_attn.validation` check, stored in the
        # check's canonical type (a frozen dataclass: `object.__setattr__`).
        for name, check in _field_checks().items():
            object.__setattr__(self, name, check(getattr(self, name), name))
        if self.learning_rate_decay == "cosine" and self.train_steps is None:
            raise ValueError(
                "`learning_rate_decay='cosine'` decays to zero at `train_steps`, "
                "so it needs `train_steps` (not `epochs`). Received: "
                f"train_steps=None, epochs={self.epochs!r}"
            )
        if (self.train_steps is None) == (self.epochs is None):
            raise ValueError(
                "Give exactly one of `train_steps` and `epochs`. Received: "
                f"train_steps={self.train_steps!r}, epochs={self.epochs!r}"
            )

    def model_overrides(self):
        """Constructor arguments that replace the preset's values.

        The attention settings (`attention_dropout`, `num_key_value_heads`)
        go into the model's `attention` dict, under the names of
        `keras_attn.layers.AttentionSettings`.
        """
        fields = (
            "num_layers",
            "hidden_dim",
            "num_heads",
            "intermediate_dim",
            "dropout",
            "position",
            "activation",
            "normalization",
            "use_bias",
        )
        overrides = {
            f: getattr(self, f) for f in fields if getattr(self, f) is not None
        }
        attention = {
            setting: getattr(self, field)
            for field, setting in ATTENTION_SETTINGS.items()
            if getattr(self, field) is not None
        }
        if attention:
            overrides["attention"] = attention
        overrides["normalize_first"] = self.normalize_first
        overrides["max_sequence_length"] = max(self.max_length + 64, 256)
        return overrides

    def bucket_boundaries(self):
        """The padded lengths of the training batches, `max_length` last.

        Without `bucket_lengths`, the pipeline's own defaults
        (`keras_attn.text.pipeline.DEFAULT_BUCKET_LENGTHS`).
        """
        # Imported here: it loads TensorFlow, which this module does not.
        from keras_attn.text.pipeline import DEFAULT_BUCKET_LENGTHS

        lengths = self.bucket_lengths or DEFAULT_BUCKET_LENGTHS
        return [n for n in lengths if n < self.max_length] + [self.max_length]

    def replace(self, **changes):
        """A copy with `changes`; giving `epochs` drops `train_steps`, and
        the other way round, so either overrides a setting's length."""
        if "epochs" in changes and "train_steps" not in changes:
            changes["train_steps"] = None
        if "train_steps" in changes and "epochs" not in changes:
            changes["epochs"] = None
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(
                f"Unknown setting(s) {unknown}. Known: "
                f"{sorted(f.name for f in dataclasses.fields(self))}"
            )
        if "preset" in changes:
            _check_preset(changes["preset"])
        return dataclasses.replace(self, **changes)


def _check_bucket_lengths(value, name):
    """`None`, or an increasing list of integers >= 2."""
    if value is None:
        return None
    from keras_attn.validation import check_positive_int_sequence

    lengths = list(check_positive_int_sequence(value, name))
    if min(lengths) < 2 or any(a >= b for a, b in zip(lengths, lengths[1:])):
        raise ValueError(
            f"`{name}` must be an increasing list of integers >= 2. "
            f"Received: {name}={value!r}"
        )
    return lengths


def _field_checks():
    """`{field: check(value, name)}`: every field's check, in field order.

    The checks are `keras_attn.validation`'s (and beam search's own
    `check_length_penalty_alpha`), imported here rather than at the top:
    importing `keras_attn` loads Keras, and the command line loads this
    module before `--backend` has chosen Keras's backend.
    """
    from keras_attn.generation.samplers import check_length_penalty_alpha
    from keras_attn.validation import (
        check_bool,
        check_choice,
        check_float,
        check_positive_float,
        check_positive_int,
        check_rate,
        check_seed,
        check_string,
    )

    positive = check_positive_int
    optional_positive = functools.partial(check_positive_int, allow_none=True)
    # A probability that excludes 1 (label smoothing, dropout rates).
    rate = check_rate
    optional_rate = functools.partial(check_rate, allow_none=True)
    non_negative = functools.partial(check_float, min_value=0.0)
    return {
        "preset": check_string,
        "num_layers": optional_positive,
        "hidden_dim": optional_positive,
        "num_heads": optional_positive,
        "intermediate_dim": optional_positive,
        "dropout": optional_rate,
        "attention_dropout": optional_rate,
        "normalize_first": check_bool,
        "position": functools.partial(check_string, allow_none=True),
        "activation": functools.partial(check_string, allow_none=True),
        "normalization": functools.partial(check_string, allow_none=True),
        "num_key_value_heads": optional_positive,
        "use_bias": functools.partial(check_bool, allow_none=True),
        "vocabulary_size": positive,
        "train_pairs": optional_positive,
        "train_steps": optional_positive,
        "epochs": optional_positive,
        "time_budget_minutes": functools.partial(check_positive_float, allow_none=True),
        "max_tokens_per_batch": positive,
        "max_length": positive,
        "bucket_lengths": _check_bucket_lengths,
        "warmup_steps": positive,
        "learning_rate_scale": check_positive_float,
        "learning_rate_decay": functools.partial(
            check_choice, choices=LEARNING_RATE_DECAYS
        ),
        "label_smoothing": rate,
        "subword_nbest_size": positive,
        "subword_alpha": non_negative,
        "r_drop_alpha": non_negative,
        "beam_size": positive,
        "length_penalty_alpha": check_length_penalty_alpha,
        "average_checkpoints": positive,
        "steps_per_execution": positive,
        "evaluation_pairs": optional_positive,
        "seed": functools.partial(check_seed, allow_none=False),
    }


def _check_preset(name):
    # Imported here: the recipe package loads no Keras at import time, so
    # that `--backend` takes effect first.
    from keras_attn.models.presets import TRANSFORMER_PRESETS

    if name not in TRANSFORMER_PRESETS:
        raise ValueError(
            f"Unknown `preset`. Known: {sorted(TRANSFORMER_PRESETS)}. "
            f"Received: preset={name!r}"
        )


def check_resumable(config, output_dir):
    """Refuses to train `config` into a run directory made with other settings.

    A run directory's `config.json` describes the model its tokenizer,
    checkpoints and backup hold. `train` resumes from that backup, so a
    different model setting would first overwrite the description and then
    fail to restore (or train a different model on the old tokenizer).
    `MODEL_SETTINGS` must be the same; the rest may differ (and the
    directory's `config.json` then records the new values). Nothing is
    written here.

    Raises:
        ValueError: naming each differing setting with both values.
    """
    path = Path(output_dir) / "config.json"
    if not path.is_file():
        return
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise ValueError(
            f"{path} is not a readable run configuration ({error}). Choose "
            "another --output-dir, or delete the directory to start over."
        ) from None
    requested = dataclasses.asdict(config)
    differing = [
        f"{name}: {stored[name]!r} in {path.name}, {requested[name]!r} requested"
        for name in MODEL_SETTINGS
        if name in stored and stored[name] != requested[name]
    ]
    if differing:
        raise ValueError(
            f"{output_dir} holds a run trained with other settings; `train` "
            "would resume it, so it refuses to change them. Differing: "
            + "; ".join(differing)
            + ". Use another --output-dir, or the run's own settings."
        )


class _NamedSettings(collections.abc.Mapping):
    """Named settings: `TranslationConfig`s made on first use.

    A setting is checked when it is made (`TranslationConfig.__post_init__`,
    which imports `keras_attn` and so Keras); the command line lists the
    names (`--setting`) before `--backend` has chosen Keras's backend.
    """

    def __init__(self, fields_by_name):
        self._fields_by_name = fields_by_name
        self._configs = {}

    def __getitem__(self, name):
        if name not in self._configs:
            self._configs[name] = TranslationConfig(**self._fields_by_name[name])
        return self._configs[name]

    def __iter__(self):
        return iter(self._fields_by_name)

    def __len__(self):
        return len(self._fields_by_name)


# The published text-only baseline's model ("transformer_tiny" of fairseq):
# small data wants a small model and many updates.
_TINY_AND_DEEP = dict(
    preset="transformer_small",
    num_layers=4,
    hidden_dim=128,
    num_heads=4,
    intermediate_dim=256,
)

SETTINGS = _NamedSettings(
    {
        # The README's main job: 2,400 updates, 9 minutes of training on 2 AMD
        # EPYC cores with AVX-512, 17.5 on an older 2-core VM without it
        # (docs/translation.md).
        # A small, deep model and many updates (docs/translation.md, "Tried").
        # A 4,000-piece vocabulary (fewer, better-trained embeddings and a
        # cheaper output layer) and pre-norm blocks, which train stably at a
        # peak rate of 0.0094 where post-norm stalled (docs/translation.md,
        # "Tried": e2).
        "quick": dict(
            **_TINY_AND_DEEP,
            dropout=0.1,
            normalize_first=True,
            vocabulary_size=4000,
            train_steps=2400,
            max_tokens_per_batch=2048,
            warmup_steps=800,
            # Peak rate scale * (d_model * warmup)^-0.5 = 0.0094.
            learning_rate_scale=3.0,
            beam_size=5,
            average_checkpoints=3,
        ),
        # The published text-only baseline's regime ("transformer_tiny" of
        # fairseq: 4+4 layers, d_model 128, d_ff 256, 4 heads, 2,000 warm-up
        # updates, 4,096-token batches, beam 5, the last checkpoints averaged)
        # with the quick setting's changes: pre-norm blocks at a 1.5 times
        # higher peak rate (docs/translation.md, "Tried": e4); dropout 0.2
        # instead of the anchor's 0.3 (d2), a length penalty of 1.0 instead of
        # 0.6, which the outputs' brevity asked for, and a 6,000-piece
        # vocabulary, chosen on val over 2,000 to 8,000 pieces (v6k: two seeds
        # 0.8 BLEU above 4,000 pieces on val, the same on test within a seed's
        # noise), and a feed-forward width of 512 instead of 256 (v6f512: the
        # best val score of all runs, 0.17 above v6k; 1.13 times v6k's time per
        # update), and rotary positions instead of the sinusoid (rot, issue
        # #38: 0.46 above v6f512 on val, 0.04 above the modern block, at
        # v6f512's parameter count). 54 epochs of 150 batches.
        "full": dict(
            **{**_TINY_AND_DEEP, "intermediate_dim": 512},
            position="rotary",
            dropout=0.2,
            normalize_first=True,
            vocabulary_size=6000,
            train_steps=8030,
            max_tokens_per_batch=4096,
            warmup_steps=2000,
            # Peak rate scale * (d_model * warmup)^-0.5 = 0.0075 (the anchor's
            # post-norm model: 0.005).
            learning_rate_scale=3.795,
            beam_size=5,
            length_penalty_alpha=1.0,
            average_checkpoints=10,
        ),
        # For tests: a few hundred pairs and a tiny model, seconds per epoch.
        "tiny": dict(
            preset="transformer_tiny",
            vocabulary_size=300,
            train_pairs=300,
            epochs=2,
            max_tokens_per_batch=512,
            max_length=64,
            warmup_steps=50,
            beam_size=2,
            evaluation_pairs=16,
        ),
    }
)
