"""Saving LoRA layers with their factors, and merged for plain layers too."""

import keras
import numpy as np

# Store key of a LoRA layer's file: how many entries the merged part holds.
MERGED_COUNT_KEY = "lora_merged_count"


class LoraSavingMixin:
    """Saves a LoRA-enabled layer both merged and with its factors.

    Keras's `Dense`, `EinsumDense` and `Embedding` save a LoRA-enabled
    layer with the factors merged into the kernel, and loading into a
    LoRA-enabled layer sets both factors to zero: the outputs survive, but
    training cannot go on (with `A = B = 0` both factors get zero
    gradients) and the saved optimizer state no longer matches.

    With this mixin first in the bases, a LoRA-enabled layer writes:

    - entries `"0"`, `"1"`, ...: the parent's own (merged) format, exactly
      what Keras writes, so a layer *without* LoRA loads the file as
      Keras's own layer would (`load_weights` into a fresh model);
    - then every variable as it is (base weights, float or quantized, then
      the factors), which a LoRA-enabled layer loads back exactly;
    - `"lora_merged_count"`: how many entries the merged part holds.

    Files written before the merged part existed (every variable, no
    count) still load into a LoRA-enabled layer. Everything else (a layer
    without LoRA saving, a plain file loaded into a LoRA layer) is the
    parent's own saving and loading. The kernel is stored twice for LoRA
    layers: the price of files that both kinds of layer read.
    """

    def save_own_variables(self, store):
        super().save_own_variables(store)
        if not getattr(self, "lora_enabled", False):
            return
        merged_count = len(store.keys())
        unmerged = {}
        # `keras.layers.Layer`'s own format: every variable in creation order.
        keras.layers.Layer.save_own_variables(self, unmerged)
        for index in range(len(unmerged)):
            store[str(merged_count + index)] = unmerged[str(index)]
        store[MERGED_COUNT_KEY] = np.asarray(merged_count, dtype="int64")

    def load_own_variables(self, store):
        keys = set(store.keys())
        lora_enabled = getattr(self, "lora_enabled", False)
        if MERGED_COUNT_KEY not in keys:
            if lora_enabled and len(keys) == len(self.variables):
                # A file from before the merged part: every variable as is.
                return keras.layers.Layer.load_own_variables(self, store)
            return super().load_own_variables(store)
        merged_count = int(np.asarray(store[MERGED_COUNT_KEY]))
        if not lora_enabled:
            merged = {str(i): store[str(i)] for i in range(merged_count)}
            return super().load_own_variables(merged)
        unmerged_count = len(keys) - 1 - merged_count
        if unmerged_count != len(self.variables):
            raise ValueError(
                f"Layer '{self.name}' holds {len(self.variables)} variables "
                f"with LoRA enabled, but its saved LoRA state has "
                f"{unmerged_count}: was it saved with another LoRA rank or "
                "quantization mode?"
            )
        unmerged = {
            str(i): store[str(merged_count + i)] for i in range(unmerged_count)
        }
        return keras.layers.Layer.load_own_variables(self, unmerged)
