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

    The generator starts every prompt with the tokenizer's start id, as a
    checkpoint whose tokenizer adds a BOS does (Llama 2 and 3, Mistral). A
    checkpoint whose tokenizer adds none (Qwen2) is refused: load its
    model with `TransformerLM.from_preset` and its tokenizer with
    `keras_attn.hf.tokenizer.HFTokenizer.from_directory`, and continue its
    ids with `keras_attn.generation.generate_lm`.

    Args:
        task_class: `keras_attn.text.TextGenerator` (or a subclass).
        source: `"hf://owner/name[@revision]"` or a checkpoint directory.
        dtype: the model's dtype policy. Defaults to `None` (float32).
        **kwargs: the task's arguments (`sampler`, `max_length`, ...).

    Raises:
        ValueError: a checkpoint whose tokenizer adds no start token.
    """
    directory = resolve_checkpoint(source)
    overrides = {} if dtype is None else {"dtype": dtype}
    model = checkpoints.load_model(directory, TransformerLM, **overrides)
    tokenizer = HFTokenizer.from_directory(directory)
    if tokenizer.start_id is None or tokenizer.encode([""])[0][:1] != [
        tokenizer.start_id
    ]:
        raise ValueError(
            f"{task_class.__name__} starts every prompt with a start token, and "
            f"the tokenizer of {str(source)!r} adds none (as Qwen2's). Load the "
            "model with TransformerLM.from_preset and the tokenizer with "
            "keras_attn.hf.tokenizer.HFTokenizer.from_directory, and continue "
            "its ids with keras_attn.generation.generate_lm."
        )
    return task_class(
        model,
        CheckpointTokenizer(tokenizer, model.vocabulary_size, model.pad_id),
        **kwargs,
    )
