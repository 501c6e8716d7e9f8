"""Text tasks from a Hugging Face checkpoint: the model and its tokenizer.

`keras_attn.text.TextGenerator.from_preset("hf://owner/name")` (or a local
checkpoint directory) runs `load_text_generator`.
"""

from keras_attn.hf import checkpoints
from keras_attn.hf.files import resolve_checkpoint
from keras_attn.hf.tokenizer import HFTokenizer
from keras_attn.models.transformer_lm import TransformerLM
from keras_attn.text.checkpoint_tokenizer import CheckpointTokenizer


def load_text_generator(task_class, source, dtype=None, **kwargs):
    """A `TextGenerator` (`task_class`) of a causal LM checkpoint.

    The generator starts every prompt with the start id where the
    checkpoint's tokenizer adds a BOS (Llama 2 and 3, Mistral), and with the
    prompt's own pieces where it adds none (Qwen2: `add_start=False`, so an
    empty prompt is refused), as `transformers` encodes the prompt.

    Args:
        task_class: `keras_attn.text.TextGenerator` (or a subclass).
        source: `"hf://owner/name[@revision]"` or a checkpoint directory.
        dtype: the model's dtype policy. Defaults to `None` (float32).
        **kwargs: the task's arguments (`sampler`, `max_length`, ...).
    """
    directory = resolve_checkpoint(source)
    overrides = {} if dtype is None else {"dtype": dtype}
    model = checkpoints.load_model(directory, TransformerLM, **overrides)
    tokenizer = HFTokenizer.from_directory(directory)
    first = tokenizer.encode([""])[0][:1]  # the BOS where it adds one
    kwargs.setdefault(
        "add_start", tokenizer.start_id is not None and first == [tokenizer.start_id]
    )
    return task_class(
        model,
        CheckpointTokenizer(tokenizer, model.vocabulary_size, model.pad_id),
        **kwargs,
    )
