"""Docstring text that several entry points share, written once.

As Keras's optimizers insert "{{base_optimizer_keyword_args}}" into each
optimizer's docstring: a docstring holds `{{name}}` alone on a line, where
`insert_shared_text` puts `SHARED_TEXT[name]`, indented as that line. A
class or function is decorated with `@shared_docstrings`, which does it
for its docstring (and a class's methods'); the API reference does it for
the docstrings it reads from the source
(`scripts/griffe_keras_docstrings.py`, which loads this file alone: it
imports nothing).
"""

import inspect
import re
import textwrap

SHARED_TEXT = {
    # The Args entries of the arguments every `ZooModel` takes last.
    "zoo_model_arguments": """\
dtype: dtype or `keras.DTypePolicy` of the layers. Defaults to
    `None`, meaning the global policy.
normalization: `"layer"` (layer normalization) or `"rms"`
    (RMSNorm, Zhang and Sennrich, 2019), for every norm of the
    model: the blocks' and the model's own. Defaults to `"layer"`.
use_bias: bool, biases in the attention projections and the
    feed-forward layers and offsets in the layer norms; `False`
    removes them all (PaLM). Defaults to `True`.
attention: a `keras_attn.layers.AttentionSettings`, or a dict of
    its fields, shared by every attention layer: key/value heads
    (decoding caches hold only these), the features per head
    (`head_dim`, else `hidden_dim // num_heads`), query-key
    normalization, the fused kernel, dropout on the attention
    weights, ... (the
    rotation is the position scheme's). Defaults to `None`,
    meaning `AttentionSettings()` (no attention dropout).""",
    # The Args entries of a `decode_step`'s cache and index.
    "decode_step_arguments": """\
cache: the dict from `initial_cache` (or a previous step).
cache_index: int or scalar int tensor, the slot of the first
    new position, in `[0, max_length - new_length]`. A Python
    or NumPy integer outside that range is a `ValueError`; a
    tensor (the decoding loop's, traced or eager) is clipped
    into it, and the step runs at the clipped index, the same
    on every backend (`keras_attn.layers.attention.cache_index`).""",
    # The `jit_compile` argument of the text tasks that decode.
    "jit_compile_arg": """\
jit_compile: `"auto"`, `True` or `False` (NumPy booleans too),
    how Keras compiles the decoding loop
    (`SequenceGenerator.compile(jit_compile=...)`). `"auto"` is
    Keras's default: XLA on JAX, `tf.function` on
    TensorFlow, eager steps on torch. `True` on torch hands the loop
    to `torch.compile`: about 2x faster per batch once compiled, but
    the first batch of each shape compiles for up to a minute
    (`docs/performance.md`, "Compiled decoding on torch"), so it
    pays off for a server, not for a few sentences. Defaults to
    `"auto"`.""",
    # A Hugging Face family's `load_model(directory, config, weights,
    # **overrides)` (`keras_attn.hf`).
    "load_model_args": """\
directory: the checkpoint directory (for messages).
config: its `config.json` (`keras_attn.hf.files.read_config`).
weights: its tensors (`keras_attn.hf.files.read_weights`), or
    `None` for random weights.""",
    "overrides": """\
**overrides: `dtype`, `name` or `flash_attention`
    (`keras_attn.hf.files.OVERRIDES`); arguments that would change the
    architecture are refused.""",
}

_PLACEHOLDER = re.compile(r"^(?P<indent>[ \t]*)\{\{(?P<name>\w+)\}\}[ \t]*$", re.M)


def insert_shared_text(docstring):
    """`docstring` with each `{{name}}` line replaced by `SHARED_TEXT[name]`.

    Args:
        docstring: str, or `None` (under `python -OO`), returned as is.

    Returns:
        The docstring, its placeholders replaced and indented as they were.

    Raises:
        KeyError: a placeholder names no entry of `SHARED_TEXT`.
    """
    if docstring is None:
        return None
    return _PLACEHOLDER.sub(
        lambda match: textwrap.indent(SHARED_TEXT[match["name"]], match["indent"]),
        docstring,
    )


def shared_docstrings(obj):
    """Decorator: `insert_shared_text` on the docstring of a function, or
    of a class and the methods it defines. Returns `obj`."""
    obj.__doc__ = insert_shared_text(obj.__doc__)
    if inspect.isclass(obj):
        for value in vars(obj).values():
            if inspect.isfunction(value):
                value.__doc__ = insert_shared_text(value.__doc__)
    return obj
