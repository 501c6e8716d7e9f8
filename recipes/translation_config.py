"""Settings of the Multi30k translation recipe: plain data, overridable."""

import dataclasses


@dataclasses.dataclass(frozen=True)
class TranslationConfig:
    """Everything one training run of `translate_multi30k.py` depends on.

    Model shape comes from `preset`; any field left `None` keeps the
    preset's value.
    """

    preset: str = "transformer_small"
    num_layers: int | None = None
    hidden_dim: int | None = None
    num_heads: int | None = None
    intermediate_dim: int | None = None
    dropout: float | None = None
    normalize_first: bool = False
    vocabulary_size: int = 8000
    train_pairs: int | None = None  # None: all 29,000
    epochs: int = 10
    time_budget_minutes: float | None = None  # stop training after this
    max_tokens_per_batch: int = 4096
    max_length: int = 128
    warmup_steps: int = 4000
    learning_rate_scale: float = 1.0
    label_smoothing: float = 0.1
    beam_size: int = 4
    length_penalty_alpha: float = 0.6
    evaluation_pairs: int | None = None  # None: the whole split
    seed: int = 0

    def __post_init__(self):
        positive = (
            "vocabulary_size",
            "epochs",
            "max_tokens_per_batch",
            "max_length",
            "warmup_steps",
            "beam_size",
        )
        optional_positive = ("num_layers", "hidden_dim", "num_heads")
        optional_positive += ("intermediate_dim", "train_pairs", "evaluation_pairs")
        for name in positive + optional_positive:
            value = getattr(self, name)
            if value is None and name in optional_positive:
                continue
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(
                    f"`{name}` must be a positive integer. Received: {name}={value!r}"
                )
        for name, low, high in (
            ("label_smoothing", 0.0, 1.0),
            ("dropout", 0.0, 1.0),
            ("length_penalty_alpha", 0.0, float("inf")),
        ):
            value = getattr(self, name)
            if value is None and name == "dropout":
                continue
            if not isinstance(value, (int, float)) or not low <= value < high:
                raise ValueError(
                    f"`{name}` must be a number in [{low}, {high}). "
                    f"Received: {name}={value!r}"
                )
        for name in ("time_budget_minutes", "learning_rate_scale"):
            value = getattr(self, name)
            if value is None and name == "time_budget_minutes":
                continue
            if not isinstance(value, (int, float)) or not value > 0:
                raise ValueError(
                    f"`{name}` must be a positive number. Received: {name}={value!r}"
                )

    def model_overrides(self):
        """Constructor arguments that replace the preset's values."""
        fields = (
            "num_layers",
            "hidden_dim",
            "num_heads",
            "intermediate_dim",
            "dropout",
        )
        overrides = {
            f: getattr(self, f) for f in fields if getattr(self, f) is not None
        }
        overrides["normalize_first"] = self.normalize_first
        overrides["max_sequence_length"] = max(self.max_length + 64, 256)
        return overrides

    def replace(self, **changes):
        unknown = sorted(set(changes) - {f.name for f in dataclasses.fields(self)})
        if unknown:
            raise ValueError(
                f"Unknown setting(s) {unknown}. Known: "
                f"{sorted(f.name for f in dataclasses.fields(self))}"
            )
        return dataclasses.replace(self, **changes)


SETTINGS = {
    # The README's main command: about 10 minutes of training on 2 CPU cores.
    "quick": TranslationConfig(
        preset="transformer_small",
        num_layers=3,
        hidden_dim=256,
        num_heads=4,
        intermediate_dim=1024,
        vocabulary_size=8000,
        epochs=6,
        time_budget_minutes=9.0,
        max_tokens_per_batch=3072,
        warmup_steps=500,
        learning_rate_scale=1.0,
    ),
    # The best this 2-core CPU trains in about 85 minutes: the quick model's
    # shape and batches, a longer warm-up, then 1/sqrt(step) decay.
    "full": TranslationConfig(
        preset="transformer_small",
        num_layers=3,
        hidden_dim=256,
        num_heads=4,
        intermediate_dim=1024,
        vocabulary_size=8000,
        epochs=60,
        time_budget_minutes=80.0,
        # A multiple of lcm(bucket lengths) = 384, so that every bucket's
        # batch splits evenly over 2, 4 or 8 data-parallel replicas.
        max_tokens_per_batch=3072,
        warmup_steps=800,
        learning_rate_scale=1.0,
    ),
    # For tests: a few hundred pairs and a tiny model, seconds per epoch.
    "tiny": TranslationConfig(
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
