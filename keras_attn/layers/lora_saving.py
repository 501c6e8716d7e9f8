"""Saving LoRA layers with their factors, instead of merged into the kernel."""

import keras


class LoraSavingMixin:
    """Saves a LoRA-enabled layer's base weights and LoRA factors unmerged.

    Keras's `Dense`, `EinsumDense` and `Embedding` save a LoRA-enabled
    layer with the factors merged into the kernel, and loading into a
    LoRA-enabled layer sets both factors to zero: the outputs survive, but
    training cannot go on (with `A = B = 0` both factors get zero
    gradients) and the saved optimizer state no longer matches. With this
    mixin first in the bases, a LoRA-enabled layer saves every variable as
    it is (base weights, float or quantized, then the factors), and loads
    such a file back exactly. Everything else (a layer without LoRA, a file
    saved merged) is the parent's own saving and loading.
    """

    def save_own_variables(self, store):
        if not getattr(self, "lora_enabled", False):
            return super().save_own_variables(store)
        # `keras.layers.Layer`'s own format: every variable in creation order.
        return keras.layers.Layer.save_own_variables(self, store)

    def load_own_variables(self, store):
        if getattr(self, "lora_enabled", False) and len(store.keys()) == len(
            self.variables
        ):
            return keras.layers.Layer.load_own_variables(self, store)
        return super().load_own_variables(store)
