"""Keras's model features on every zoo model: quantization, LoRA, saving.

`ModelFeaturesMixin` goes first in the bases of each zoo model (before
`keras.Model`). It gives the model what a keras-hub backbone has:

- a `get_config` `dtype` that records quantized layers (a
  `keras.dtype_policies.DTypePolicyMap` from layer path to policy), so that
  a model quantized with `model.quantize("int8")` saves and loads as a
  `.keras` file;
- `enable_lora(rank, target_names=...)`, which freezes the model and adds
  LoRA factors to the named layers (the attention projections and the
  feed-forward layers by default), recorded in the config so that a
  `.keras` file loads back with LoRA enabled, the same factors and the same
  trainable variables (so the saved optimizer state loads too);
- `save_lora_weights` / `load_lora_weights`, the factors alone in a small
  `.lora.npz` file, to share a fine-tune of a known base model.
"""

import keras
import numpy as np

from keras_attn.validation import check_positive_int

# The attention projections (`MultiHeadAttention`) and the two layers of
# each `FeedForward`.
DEFAULT_LORA_LAYER_NAMES = (
    "query",
    "key",
    "value",
    "attention_output",
    "intermediate_dense",
    "output_dense",
)
LORA_SUFFIX = ".lora.npz"


def _leaf_layers(model):
    """The layers that hold weights themselves (no sub-layers with weights)."""
    return [
        layer
        for layer in model._flatten_layers(include_self=False)
        if layer.weights and len(list(layer._flatten_layers())) == 1
    ]


class ModelFeaturesMixin:
    """Quantization-aware config, LoRA and LoRA files for a functional model.

    The model sets `self._layers_dtype_policy` (the policy its layers were
    built with); `ZooModel.get_config` records `_dtype_config()` and the
    LoRA setup, and `ZooModel.from_config` restores them.
    """

    # === Quantization ===

    def _dtype_config(self):
        """The serialized `dtype` of `get_config`, quantized layers included."""
        policy = self._layers_dtype_policy
        quantized = {
            layer.path: layer.dtype_policy
            for layer in _leaf_layers(self)
            if layer.quantization_mode is not None
        }
        if quantized and not isinstance(policy, keras.dtype_policies.DTypePolicyMap):
            policy = keras.dtype_policies.DTypePolicyMap(default_policy=policy)
            for path, layer_policy in quantized.items():
                policy[path] = layer_policy
        return keras.dtype_policies.serialize(policy)

    # === LoRA ===

    def default_lora_layer_names(self):
        """The names of the layers that `enable_lora` adapts by default.

        Returns:
            A list of layer names: the query, key, value and output
            projections of every attention layer and both layers of every
            feed-forward network.
        """
        return list(DEFAULT_LORA_LAYER_NAMES)

    def enable_lora(self, rank, target_names=None, lora_alpha=None):
        """Freezes the model and adds LoRA factors to the named layers.

        Every weight of the model is frozen (biases and layer norms
        included); each layer whose name is in `target_names` gets trainable
        low-rank factors `A` `(inputs, rank)` and `B` `(rank, outputs)`
        (Keras's own `enable_lora`), added to its kernel as
        `(lora_alpha / rank) * A @ B`. `B` starts at zero, so the model's
        outputs do not change until it trains.

        Args:
            rank: int, the rank of the factors.
            target_names: list of layer names. Defaults to `None`, meaning
                `default_lora_layer_names()` (the attention projections and
                the feed-forward layers).
            lora_alpha: float, the scale of the update is
                `lora_alpha / rank`. Defaults to `None`, meaning `rank`.

        Raises:
            ValueError: LoRA is already enabled, `rank` is not a positive
                integer, or no layer has one of `target_names`.

        Example:

        >>> model = keras_attn.models.TransformerLM.from_preset(
        ...     "lm_tiny", vocabulary_size=50)
        >>> model.enable_lora(rank=4)
        >>> sorted({v.path.split("/")[-1] for v in model.trainable_weights})
        ['lora_kernel_a', 'lora_kernel_b']
        """
        check_positive_int(rank, "rank")
        if getattr(self, "_lora", None):
            raise ValueError(
                "LoRA is already enabled on this model. Received: "
                f"rank={rank} (enabled with rank={self._lora['rank']})"
            )
        names = list(
            self.default_lora_layer_names() if target_names is None else target_names
        )
        targets = self._lora_targets(names, target_names)
        self.trainable = True
        for variable in self.weights:
            variable.trainable = False
        for layer in targets:
            layer.enable_lora(rank, lora_alpha=lora_alpha)
            layer.lora_kernel_a.trainable = True
            layer.lora_kernel_b.trainable = True
        self._lora = {"rank": rank, "lora_alpha": lora_alpha, "target_names": names}
        # Traced functions hold the old trainable variables.
        self.train_function = self.test_function = self.predict_function = None

    def _lora_targets(self, names, target_names):
        """The layers named in `names` that support LoRA; raises if none."""
        supported = [
            layer for layer in _leaf_layers(self) if hasattr(layer, "enable_lora")
        ]
        targets = [layer for layer in supported if layer.name in names]
        if not targets:
            available = sorted({layer.name for layer in supported})
            raise ValueError(
                "No layer of this model has one of `target_names` (layers "
                f"that support LoRA: {available}). Received: "
                f"target_names={target_names}"
            )
        return targets

    def lora_layers(self):
        """The layers with LoRA enabled, in a fixed order."""
        return [
            layer
            for layer in _leaf_layers(self)
            if getattr(layer, "lora_enabled", False)
        ]

    def save_lora_weights(self, filepath):
        """Saves the LoRA factors (only) to a `.lora.npz` file.

        Args:
            filepath: path ending in `.lora.npz`.

        Raises:
            ValueError: LoRA is not enabled, or the path has another suffix.
        """
        if not getattr(self, "_lora", None):
            raise ValueError(
                "This model has no LoRA layers: call `enable_lora(rank)` "
                f"first. Received: filepath={filepath}"
            )
        if not str(filepath).endswith(LORA_SUFFIX):
            raise ValueError(
                f"The file name must end in `{LORA_SUFFIX}`. Received: "
                f"filepath={filepath}"
            )
        arrays = {"rank": np.asarray(self._lora["rank"])}
        for layer in self.lora_layers():
            for factor in ("lora_kernel_a", "lora_kernel_b"):
                arrays[f"{layer.path}/{factor}"] = keras.ops.convert_to_numpy(
                    getattr(layer, factor)
                )
        with open(filepath, "wb") as file:
            np.savez(file, **arrays)

    def load_lora_weights(self, filepath):
        """Loads LoRA factors saved by `save_lora_weights`.

        Enables LoRA with the file's rank (default target layers) when it is
        not enabled yet.

        Args:
            filepath: a `.lora.npz` file.

        Raises:
            ValueError: the ranks differ, or the file lacks a LoRA layer of
                this model.
        """
        with np.load(filepath) as arrays:
            rank = int(arrays["rank"])
            if not getattr(self, "_lora", None):
                self.enable_lora(rank)
            elif self._lora["rank"] != rank:
                raise ValueError(
                    f"{filepath} holds LoRA factors of rank {rank}, but the "
                    f"model's LoRA has rank {self._lora['rank']}. Received: "
                    f"filepath={filepath}"
                )
            for layer in self.lora_layers():
                for factor in ("lora_kernel_a", "lora_kernel_b"):
                    key = f"{layer.path}/{factor}"
                    if key not in arrays:
                        raise ValueError(
                            f"{filepath} has no LoRA factors for layer "
                            f"{layer.path}. Received: filepath={filepath}"
                        )
                    getattr(layer, factor).assign(arrays[key])
