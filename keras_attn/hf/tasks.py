"""Text tasks from a Hugging Face checkpoint: the model and its tokenizer.

`keras_attn.text.TextGenerator.from_preset("hf://owner/name")` (or a local
checkpoint directory) runs `load_text_generator`, and
`keras_attn.text.Translator.from_preset` the family's `load_translator`
(Marian, T5), which is `load_translator` here.
"""

from keras_attn.hf import checkpoints
from keras_attn.hf.files import family, read_config, read_weights, resolve_checkpoint
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


def load_translator(translator_class, source, dtype, model_types, **options):
    """A `Translator` of an encoder-decoder checkpoint: its model and tokenizer.

    What `keras_attn.text.Translator.from_preset("hf://...")` (or a local
    checkpoint directory) runs, through the family's `load_translator`: the
    family of the checkpoint's `model_type` maps its tokenizer
    (`load_tokenizer(directory, config)`) and its model (`load_model`).
    Decoding is ours (`Translator`'s options); the checkpoint's
    `generation_config.json` is not read.

    Args:
        translator_class: `keras_attn.text.Translator` (or a subclass).
        source: `"hf://owner/name[@revision]"` or a checkpoint directory.
        dtype: the model's dtype policy; `None` means the global policy.
        model_types: the `model_type`s the caller's family maps; another
            is refused.
        **options: `Translator` arguments (`strategy`, `beam_size`,
            `batch_size`, ...); those that are `None` are left out.

    Returns:
        A `translator_class`.
    """
    directory = resolve_checkpoint(source)
    config = read_config(directory)
    if config["model_type"] not in model_types:
        raise ValueError(
            f"This loads a checkpoint of model_type {' or '.join(map(repr, model_types))}. "
            f"Received: {str(source)!r} with model_type={config['model_type']!r}"
        )
    mapping = family(config["model_type"])
    tokenizer = mapping.load_tokenizer(directory, config)
    overrides = {} if dtype is None else {"dtype": dtype}
    model = mapping.load_model(directory, config, read_weights(directory), **overrides)
    options = {name: value for name, value in options.items() if value is not None}
    return translator_class(model, tokenizer, **options)
