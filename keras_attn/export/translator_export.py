"""A trained translator as a SavedModel: raw text in, text out."""

import json
from pathlib import Path

import keras
import tensorflow as tf

from keras_attn.export.jax_stablehlo import tensorflow_compatible_stablehlo
from keras_attn.export.tensorflow_process import export_in_tensorflow_process
from keras_attn.generation.beam_search import beam_search, check_beam_search_args
from keras_attn.generation.decoding_loop import MAX_LENGTH_OFFSET
from keras_attn.generation.greedy_search import greedy_search

STRATEGIES = ("beam", "greedy")
# The smallest source-length bucket; the others double up to the maximum.
SMALLEST_SOURCE_BUCKET = 16
# Batch buckets of a JAX export (larger batches pad to multiples of 64).
JAX_BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
CONFIG_FILE = "translator_export.json"


def default_source_length_buckets(max_source_length):
    """`16, 32, 64, ...` below `max_source_length`, then `max_source_length`."""
    buckets, size = [], SMALLEST_SOURCE_BUCKET
    while size < max_source_length:
        buckets.append(size)
        size *= 2
    return tuple(buckets + [max_source_length])


def _check_buckets(buckets, name, smallest_largest=None):
    """Sorted, distinct positive ints; the largest at least `smallest_largest`."""
    if isinstance(buckets, (int, str)) or not buckets:
        raise ValueError(
            f"`{name}` must be a non-empty sequence of positive integers. "
            f"Received: {name}={buckets!r}"
        )
    for size in buckets:
        if isinstance(size, bool) or not isinstance(size, int) or size <= 0:
            raise ValueError(
                f"`{name}` must contain only positive integers. "
                f"Received: {name}={buckets!r}"
            )
    buckets = tuple(sorted(set(buckets)))
    if smallest_largest is not None and buckets[-1] < smallest_largest:
        raise ValueError(
            f"The largest of `{name}` must be at least max_source_length="
            f"{smallest_largest}, so that every (truncated) source fits. "
            f"Received: {name}={buckets!r}"
        )
    return buckets


def _check_max_source_length(model, max_source_length):
    if max_source_length is None:
        return int(model.max_sequence_length)
    if (
        isinstance(max_source_length, bool)
        or not isinstance(max_source_length, int)
        or max_source_length < 2
    ):
        raise ValueError(
            "`max_source_length` must be an integer >= 2 (one token and the "
            f"end id). Received: max_source_length={max_source_length!r}"
        )
    if model.position == "learned" and max_source_length > model.max_sequence_length:
        raise ValueError(
            "`max_source_length` must be at most the model's "
            f"max_sequence_length={model.max_sequence_length} with learned "
            f"positions. Received: max_source_length={max_source_length}"
        )
    return max_source_length


def _smallest_bucket_index(buckets, value):
    """Index of the first bucket `>= value` (`len(buckets)` if none is)."""
    sorted_buckets = tf.constant(buckets, dtype=value.dtype)
    return tf.searchsorted(sorted_buckets, value[tf.newaxis], side="left")[0]


class _TextFunctions:
    """The string-side TensorFlow code around the exported decoder.

    Tokenizes (end id appended, truncated), drops empty sentences, pads the
    batch and the source length to their buckets, runs the `generate_*`
    endpoint of that source bucket, detokenizes and restores the input order.
    """

    def __init__(
        self,
        tokenizer,
        generate,
        max_source_length,
        source_length_buckets,
        batch_size_buckets,
    ):
        self.tokenizer = tokenizer
        self.generate = generate  # source bucket (or None) -> endpoint
        self.max_source_length = max_source_length
        self.source_length_buckets = source_length_buckets
        self.batch_size_buckets = batch_size_buckets

    def source_ids(self, sentences):
        """`(batch, (length))` ids: tokens cut to `max_source_length - 1`, end id."""
        ids = self.tokenizer.tokenize(sentences)[:, : self.max_source_length - 1]
        end = tf.fill([ids.nrows(), 1], tf.constant(self.tokenizer.end_id, tf.int32))
        return tf.concat([ids, end], axis=1)

    def padded_width(self, length):
        """The source bucket of a batch whose longest row has `length` ids."""
        if self.source_length_buckets is None:
            return length
        index = _smallest_bucket_index(self.source_length_buckets, length)
        return tf.gather(self.source_length_buckets, index)

    def padded_batch_size(self, count):
        """The batch bucket of `count` rows (multiples of the largest beyond it)."""
        if self.batch_size_buckets is None:
            return count
        buckets = self.batch_size_buckets
        largest = buckets[-1]
        index = _smallest_bucket_index(buckets, count)
        return tf.where(
            index < len(buckets),
            tf.gather(buckets, tf.minimum(index, len(buckets) - 1)),
            (count + largest - 1) // largest * largest,
        )

    def tokenize(self, sentences):
        ids = self.source_ids(sentences)
        lengths = tf.cast(ids.row_lengths(), tf.int32)
        longest = tf.maximum(tf.reduce_max(lengths), 1)  # 1 for no rows
        dense = ids.to_tensor(default_value=self.tokenizer.pad_id)
        width = self.padded_width(longest)
        padding = [[0, 0], [0, width - tf.shape(dense)[1]]]
        # (batch, source_bucket)
        token_ids = tf.pad(dense, padding, constant_values=self.tokenizer.pad_id)
        return {"token_ids": token_ids, "lengths": lengths}

    def _decode(self, rows):
        """Translates ragged source ids, none of them empty: `(texts, scores)`."""
        count = rows.nrows(out_type=tf.int32)
        # Padding rows repeat real ones: they end when those end, so they
        # never keep the decoding loop running longer.
        # (padded_batch, (length))
        rows = tf.gather(rows, tf.range(self.padded_batch_size(count)) % count)

        def run(source_bucket):
            # (padded_batch, source_bucket)
            tokens = rows.to_tensor(
                default_value=self.tokenizer.pad_id, shape=[None, source_bucket]
            )
            outputs = self.generate[source_bucket](tokens)
            texts = self.tokenizer.detokenize(outputs["tokens"][:count])
            return texts, outputs["scores"][:count]

        if self.source_length_buckets is None:
            return run(None)
        longest = tf.reduce_max(tf.cast(rows.row_lengths(), tf.int32))
        index = _smallest_bucket_index(self.source_length_buckets, longest)
        branches = [
            (lambda bucket=bucket: run(bucket)) for bucket in self.source_length_buckets
        ]
        return tf.switch_case(index, branches)

    def translate(self, sentences):
        ids = self.source_ids(sentences)
        batch_size = tf.shape(sentences)[0]
        # A sentence without subword tokens has only the end id: its
        # translation is empty, as in `keras_attn.text.Translator`.
        todo = tf.where(ids.row_lengths() > 1)[:, 0]

        def decode():
            texts, scores = self._decode(tf.gather(ids, todo))
            indices = todo[:, tf.newaxis]
            return (
                tf.tensor_scatter_nd_update(tf.fill([batch_size], ""), indices, texts),
                tf.tensor_scatter_nd_update(tf.zeros([batch_size]), indices, scores),
            )

        def nothing_to_decode():
            return tf.fill([batch_size], ""), tf.zeros([batch_size])

        texts, scores = tf.cond(tf.size(todo) > 0, decode, nothing_to_decode)
        return {"translations": texts, "scores": scores}


def _decoding_function(model, tokenizer, strategy, options):
    search = beam_search if strategy == "beam" else greedy_search

    def generate(encoder_tokens):
        outputs = search(
            model,
            encoder_tokens,
            start_id=tokenizer.start_id,
            end_id=tokenizer.end_id,
            **options,
        )
        return {"tokens": outputs["tokens"], "scores": outputs["scores"]}

    return generate


def export_translator(
    model,
    tokenizer,
    directory,
    strategy="beam",
    beam_size=4,
    length_penalty_alpha=0.6,
    max_source_length=None,
    source_length_buckets="auto",
    batch_size_buckets="auto",
    jax_platforms=None,
    verbose=True,
):
    """Writes a SavedModel that translates raw strings, on any backend.

    Everything runs inside the TensorFlow graph: SentencePiece tokenization
    (tensorflow-text), the encoder, cached beam or greedy search from
    `keras_attn.generation` and detokenization. Loading needs TensorFlow and
    `import tensorflow_text` (which registers the SentencePiece ops), not
    keras-attn. The tokenizer's model travels inside the SavedModel (its
    tensorflow-text resource), with a copy in `assets.extra/tokenizer/`, so
    the directory can be moved.

    On torch, the model and tokenizer are saved to a temporary directory
    and exported by a TensorFlow-backend subprocess
    (`keras_attn.export.tensorflow_process`): Keras exports a SavedModel
    from torch only through `torch_xla`. The result is a TensorFlow export.

    The model is written with `keras.export.ExportArchive`. On JAX the
    decoder endpoints are converted with `jax2tf`: each new input shape is
    compiled by XLA on its first call in the serving process (seconds).
    Source lengths are therefore padded to a few buckets inside the graph,
    one decoder function per bucket (`generate_<bucket>`), and on JAX the
    batch is padded to a power of two. The output is at most the source
    bucket + 50 tokens long (section 6.1 of the paper), as in
    `keras_attn.text.Translator` whose source length is padded to that
    bucket.

    Signatures:
        - `serving_default`: `sentences` (tf.string `(batch,)`) ->
          `translations` (tf.string `(batch,)`) and `scores` (float32
          `(batch,)`: the length-normalised log-probability for beam search,
          the summed log-probability for greedy search). An empty sentence
          (no subword tokens) gives `""` and score 0. A sentence of more
          than `max_source_length` tokens (end id included) is truncated to
          its first `max_source_length - 1` tokens and the end id.
        - `tokenize`: `sentences` -> `token_ids` (int32 `(batch, bucket)`,
          end id appended, padded with 0 to the source bucket) and
          `lengths` (int32 `(batch,)`).
        - `logits`: `encoder_tokens`, `decoder_tokens` (int32 `(batch,
          length)`) -> `logits` (float32 `(batch, target_length,
          vocabulary_size)`), the model's teacher-forced forward pass.
        - `generate_<bucket>` (or `generate` without buckets):
          `encoder_tokens` (int32 `(batch, bucket)`) -> `tokens` (int32
          `(batch, bucket + 50)`) and `scores`.

    Args:
        model: a trained `keras_attn.models.Transformer`.
        tokenizer: the `keras_attn.text.SubwordTokenizer` it was trained
            with.
        directory: `str` or `pathlib.Path`, where to write the SavedModel.
        strategy: `"beam"` or `"greedy"`. Defaults to `"beam"`.
        beam_size: int, hypotheses kept by beam search. Defaults to `4`.
        length_penalty_alpha: float, beam search's length penalty `alpha`.
            Defaults to `0.6`.
        max_source_length: int, most source ids (end id included); longer
            sentences are truncated. Defaults to `None`, meaning the model's
            `max_sequence_length`.
        source_length_buckets: sorted source lengths to pad to, the largest
            at least `max_source_length`; `None` for one decoder function
            over any length (each new length then compiles again on JAX,
            and outputs are capped at `max_source_length + 50` tokens).
            Defaults to `"auto"`: `16, 32, 64, ...` and `max_source_length`.
        batch_size_buckets: batch sizes to pad to (larger batches pad to
            multiples of the largest), or `None` for no padding. Defaults to
            `"auto"`: `1, 2, 4, ..., 64` on JAX, where every batch size
            compiles once, `None` on TensorFlow, where it costs nothing.
        jax_platforms: JAX only, the platforms to lower for, e.g.
            `("cpu", "cuda")`. Defaults to `None`, meaning the platform of
            the exporting process.
        verbose: bool, whether to print the endpoints. Defaults to `True`.

    Returns:
        The `pathlib.Path` of the SavedModel.

    Example:

    >>> keras_attn.export.export_translator(model, tokenizer, "/tmp/en_de")
    >>> import tensorflow as tf, tensorflow_text  # noqa: F401 (registers ops)
    >>> translator = tf.saved_model.load("/tmp/en_de")
    >>> translator.signatures["serving_default"](
    ...     sentences=tf.constant(["A dog runs."]))["translations"]
    <tf.Tensor: shape=(1,), dtype=string, numpy=array([b'Ein Hund rennt.'], ...)>
    """
    if tokenizer.vocabulary_size != model.vocabulary_size:
        raise ValueError(
            "The tokenizer and the model disagree on the vocabulary size. "
            f"Received: tokenizer.vocabulary_size={tokenizer.vocabulary_size}, "
            f"model.vocabulary_size={model.vocabulary_size}"
        )
    if strategy not in STRATEGIES:
        raise ValueError(
            f"`strategy` must be one of {STRATEGIES}. Received: strategy={strategy!r}"
        )
    options = {}
    if strategy == "beam":
        check_beam_search_args(beam_size, length_penalty_alpha)
        options = dict(beam_size=beam_size, length_penalty_alpha=length_penalty_alpha)
    max_source_length = _check_max_source_length(model, max_source_length)
    if source_length_buckets == "auto":
        source_length_buckets = default_source_length_buckets(max_source_length)
    elif source_length_buckets is not None:
        source_length_buckets = _check_buckets(
            source_length_buckets, "source_length_buckets", max_source_length
        )
    on_jax = keras.backend.backend() == "jax"
    if batch_size_buckets == "auto":
        batch_size_buckets = JAX_BATCH_SIZE_BUCKETS if on_jax else None
    elif batch_size_buckets is not None:
        batch_size_buckets = _check_buckets(batch_size_buckets, "batch_size_buckets")
    if keras.backend.backend() == "torch":
        if jax_platforms is not None:
            raise ValueError(
                "`jax_platforms` applies to the JAX backend only. Received: "
                f"jax_platforms={jax_platforms!r} with KERAS_BACKEND=torch"
            )
        return export_in_tensorflow_process(
            model,
            tokenizer,
            directory,
            strategy=strategy,
            **options,
            max_source_length=max_source_length,
            source_length_buckets=source_length_buckets,
            batch_size_buckets=batch_size_buckets,
            verbose=verbose,
        )
    endpoint_options = {}
    if on_jax:
        jax2tf_kwargs = {"with_gradient": False}
        if jax_platforms is not None:
            jax2tf_kwargs["native_serialization_platforms"] = tuple(jax_platforms)
        endpoint_options["jax2tf_kwargs"] = jax2tf_kwargs
    elif jax_platforms is not None:
        raise ValueError(
            "`jax_platforms` applies to the JAX backend only. Received: "
            f"jax_platforms={jax_platforms!r} with KERAS_BACKEND="
            f"{keras.backend.backend()}"
        )

    directory = Path(directory)
    archive = keras.export.ExportArchive()
    with tensorflow_compatible_stablehlo():
        archive.track(model)
        archive.track(tokenizer)  # its SentencePiece resource
        generate = {}
        for bucket in source_length_buckets or (None,):
            bucket_options = dict(options)
            if bucket is None:
                bucket_options["max_length"] = max_source_length + MAX_LENGTH_OFFSET
            generate[bucket] = archive.add_endpoint(
                "generate" if bucket is None else f"generate_{bucket}",
                _decoding_function(model, tokenizer, strategy, bucket_options),
                input_signature=[keras.InputSpec(shape=(None, bucket), dtype="int32")],
                **endpoint_options,
            )

        def logits(encoder_tokens, decoder_tokens):
            inputs = {
                "encoder_tokens": encoder_tokens,
                "decoder_tokens": decoder_tokens,
            }
            return {"logits": model(inputs, training=False)}

        archive.add_endpoint(
            "logits",
            logits,
            input_signature=[keras.InputSpec(shape=(None, None), dtype="int32")] * 2,
            **endpoint_options,
        )
        text = _TextFunctions(
            tokenizer,
            generate,
            max_source_length,
            source_length_buckets,
            batch_size_buckets,
        )
        strings = [tf.TensorSpec(shape=(None,), dtype=tf.string, name="sentences")]
        for name, function in (
            ("tokenize", text.tokenize),
            ("serving_default", text.translate),
        ):
            endpoint = tf.function(function, input_signature=strings)
            endpoint.get_concrete_function()  # traced now, under the StableHLO patch
            archive.add_endpoint(name, endpoint)
        archive.write_out(str(directory), verbose=verbose)

    extra = directory / "assets.extra"
    tokenizer.save(extra / "tokenizer")
    settings = {
        "strategy": strategy,
        **options,
        "max_source_length": max_source_length,
        "source_length_buckets": source_length_buckets,
        "batch_size_buckets": batch_size_buckets,
        "max_output_length": f"source bucket + {MAX_LENGTH_OFFSET}",
        "keras_backend": keras.backend.backend(),
        "keras_version": keras.__version__,
        "tensorflow_version": tf.__version__,
        "signatures": ["serving_default", "tokenize", "logits"]
        + [f"generate_{b}" if b else "generate" for b in generate],
    }
    (extra / CONFIG_FILE).write_text(json.dumps(settings, indent=2) + "\n")
    return directory
