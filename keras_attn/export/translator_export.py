"""A trained translator as a SavedModel: raw text in, text out."""

import collections.abc
import dataclasses
import json

import keras
import tensorflow as tf

from keras_attn.export.atomic_export import export_directory
from keras_attn.export.jax_stablehlo import tensorflow_compatible_stablehlo
from keras_attn.export.tensorflow_process import export_in_tensorflow_process
from keras_attn.export.translator_arguments import (
    Destination,
    check_translator_export,
)
from keras_attn.generation.decoding_inputs import MAX_LENGTH_OFFSET, max_length_limit
from keras_attn.generation.samplers import BeamSampler, GreedySampler
from keras_attn.generation.seq2seq import generate_seq2seq
from keras_attn.validation import check_bool, check_positive_int_sequence

# The smallest source-length bucket; the others double up to the maximum.
SMALLEST_SOURCE_BUCKET = 16
# Batch buckets of a JAX export (larger batches pad to multiples of 64).
JAX_BATCH_SIZE_BUCKETS = (1, 2, 4, 8, 16, 32, 64)
CONFIG_FILE = "translator_export.json"
SAVED_MODEL = Destination("export_translator", "a SavedModel folder", "saved_model.pb")


def default_source_length_buckets(max_source_length):
    """`16, 32, 64, ...` below `max_source_length`, then `max_source_length`."""
    buckets, size = [], SMALLEST_SOURCE_BUCKET
    while size < max_source_length:
        buckets.append(size)
        size *= 2
    return tuple(buckets + [max_source_length])


def _check_buckets(buckets, name, smallest_largest=None):
    """Sorted, distinct positive ints; the largest at least `smallest_largest`."""
    checked = tuple(sorted(set(check_positive_int_sequence(buckets, name))))
    if smallest_largest is not None and checked[-1] < smallest_largest:
        raise ValueError(
            f"The largest of `{name}` must be at least max_source_length="
            f"{smallest_largest}, so that every (truncated) source fits. "
            f"Received: {name}={buckets!r}"
        )
    return checked


def _check_jax_platforms(jax_platforms, backend):
    if jax_platforms is None:
        return None
    if backend != "jax":
        raise ValueError(
            "`jax_platforms` applies to the JAX backend only. Received: "
            f"jax_platforms={jax_platforms!r} with KERAS_BACKEND={backend}"
        )
    expected = (
        "`jax_platforms` must be a non-empty sequence of platform names such "
        f"as ('cpu', 'cuda'). Received: jax_platforms={jax_platforms!r}"
    )
    if isinstance(jax_platforms, str) or not isinstance(
        jax_platforms, collections.abc.Iterable
    ):
        raise TypeError(expected)
    jax_platforms = tuple(jax_platforms)
    if not all(isinstance(platform, str) for platform in jax_platforms):
        raise TypeError(expected)
    if not jax_platforms:
        raise ValueError(expected)
    return tuple(jax_platforms)


@dataclasses.dataclass(frozen=True)
class _ExportSettings:
    """`export_translator`'s arguments, checked and resolved."""

    strategy: str
    # Beam search's `beam_size` and `length_penalty_alpha`; empty for greedy.
    search_options: dict
    max_source_length: int
    source_length_buckets: tuple | None
    batch_size_buckets: tuple | None
    jax_platforms: tuple | None

    @property
    def sampler(self):
        """The `keras_attn.generation` sampler of the chosen search."""
        if self.strategy == "beam":
            return BeamSampler(
                num_beams=self.search_options["beam_size"],
                length_penalty_alpha=self.search_options["length_penalty_alpha"],
            )
        return GreedySampler()


def _is_auto(value):
    return isinstance(value, str) and value == "auto"


def _check_padding(max_source_length, source_buckets, batch_buckets):
    """`(source_length_buckets, batch_size_buckets)` for a checked length."""
    if _is_auto(source_buckets):
        source_buckets = default_source_length_buckets(max_source_length)
    elif source_buckets is not None:
        source_buckets = _check_buckets(
            source_buckets, "source_length_buckets", max_source_length
        )
    if _is_auto(batch_buckets):
        on_jax = keras.backend.backend() == "jax"
        batch_buckets = JAX_BATCH_SIZE_BUCKETS if on_jax else None
    elif batch_buckets is not None:
        batch_buckets = _check_buckets(batch_buckets, "batch_size_buckets")
    return source_buckets, batch_buckets


def _smallest_bucket_index(buckets, value):
    """Index of the first bucket `>= value` (`len(buckets)` if none is)."""
    sorted_buckets = tf.constant(buckets, dtype=value.dtype)
    return tf.searchsorted(sorted_buckets, value[tf.newaxis], side="left")[0]


def _one_dimensional(sentences):
    """`sentences`, checked in the graph to be a `(batch,)` string tensor.

    The signature declares `sentences` of any shape: TensorFlow does not
    check a loaded signature's shapes, and with `(None,)` declared the graph
    would take the rank for granted (a `(1, 2)` batch came back as one
    translation). The check needs the rank unknown when traced; the
    reshape then gives the rest of the graph its static `(None,)` shape
    (`tf.ensure_shape` would fail first, with TensorFlow's message).
    """
    check = tf.debugging.assert_rank(
        sentences,
        1,
        message="`sentences` must be a 1-D batch of strings, shape (batch,)",
    )
    with tf.control_dependencies([check]):
        return tf.reshape(sentences, [-1])


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
        ids = self.source_ids(_one_dimensional(sentences))
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
        sentences = _one_dimensional(sentences)
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


def _decoding_function(model, tokenizer, settings, max_length=None):
    """`encoder_tokens -> {"tokens", "scores"}` with the chosen search."""
    sampler = settings.sampler

    def generate(encoder_tokens):
        outputs = generate_seq2seq(
            model,
            encoder_tokens,
            start_id=tokenizer.start_id,
            end_id=tokenizer.end_id,
            sampler=sampler,
            max_length=max_length,
        )
        return {"tokens": outputs["tokens"], "scores": outputs["scores"]}

    return generate


def _logits_function(model):
    """The teacher-forced forward pass, `(encoder, decoder) -> {"logits"}`."""

    def logits(encoder_tokens, decoder_tokens):
        inputs = {"encoder_tokens": encoder_tokens, "decoder_tokens": decoder_tokens}
        return {"logits": model(inputs, training=False)}

    return logits


def _assert_valid_tokens(tokens, name, model):
    """In-graph checks of one int `(batch, length)` input; returns the ops."""
    vocabulary_size = model.vocabulary_size
    expected = f"`{name}` must hold token ids in [0, vocabulary_size={vocabulary_size})"
    checks = [
        tf.debugging.assert_non_negative(tokens, message=expected),
        tf.debugging.assert_less(
            tokens, tf.constant(vocabulary_size, tokens.dtype), message=expected
        ),
    ]
    position_limit = model.position_scheme.max_length
    if position_limit is not None:
        checks.append(
            tf.debugging.assert_less_equal(
                tf.shape(tokens)[1],
                position_limit,
                message=f"`{name}` must have at most max_sequence_length="
                f"{model.max_sequence_length} positions "
                f"({model.position_scheme.name} positions)",
            )
        )
    return checks


def _at_least_one_position(tokens, pad_id):
    """`tokens`, padded with `pad_id` to one position if it has none.

    A function converted by jax2tf refuses a dimension of size 0 ("shape
    refinement failed"); an all-padding source reads as the empty one (the
    model masks padding).
    """
    missing = tf.maximum(1 - tf.shape(tokens)[1], 0)
    return tf.pad(tokens, [[0, 0], [0, missing]], constant_values=pad_id)


def _output_specs(unchecked):
    """`{name: tf.TensorSpec}` of what the unchecked endpoint returns."""
    outputs = unchecked.get_concrete_function().structured_outputs
    return {
        key: tf.TensorSpec(value.shape, value.dtype) for key, value in outputs.items()
    }


def _checked_logits(model, unchecked):
    """`logits` with the input checks in front of the unchecked endpoint.

    An empty batch or an empty `decoder_tokens` gives empty logits without
    calling the model, and an empty `encoder_tokens` reads as one padding
    position, on every backend: jax2tf functions refuse a size-0 dimension.
    """
    logits_dtype = _output_specs(unchecked)["logits"].dtype
    pad_id = getattr(model, "pad_id", 0)

    def logits(encoder_tokens, decoder_tokens):
        checks = _assert_valid_tokens(encoder_tokens, "encoder_tokens", model)
        checks += _assert_valid_tokens(decoder_tokens, "decoder_tokens", model)
        checks.append(
            tf.debugging.assert_equal(
                tf.shape(encoder_tokens)[0],
                tf.shape(decoder_tokens)[0],
                message="`encoder_tokens` and `decoder_tokens` must have the "
                "same batch size",
            )
        )
        with tf.control_dependencies(checks):
            # int64 ids accepted; identity: a cast to the same dtype is no op.
            encoder_tokens = tf.identity(tf.cast(encoder_tokens, tf.int32))
            decoder_tokens = tf.identity(tf.cast(decoder_tokens, tf.int32))
        batch_size = tf.shape(decoder_tokens)[0]
        target_length = tf.shape(decoder_tokens)[1]

        def run():
            encoder = _at_least_one_position(encoder_tokens, pad_id)
            return unchecked(encoder, decoder_tokens)["logits"]

        def empty():
            shape = [batch_size, target_length, model.vocabulary_size]
            return tf.zeros(shape, logits_dtype)

        nonempty = tf.logical_and(batch_size > 0, target_length > 0)
        return {"logits": tf.cond(nonempty, run, empty)}

    return logits


def _checked_generate(model, unchecked):
    """`generate_<bucket>` with the input checks in front of the unchecked one.

    An empty batch gives empty outputs without decoding; an empty source
    (the bucketless `generate`) reads as one padding position.
    """
    specs = _output_specs(unchecked)
    pad_id = getattr(model, "pad_id", 0)

    def generate(encoder_tokens):
        checks = _assert_valid_tokens(encoder_tokens, "encoder_tokens", model)
        with tf.control_dependencies(checks):
            # int64 ids accepted; identity: a cast to the same dtype is no op.
            encoder_tokens = tf.identity(tf.cast(encoder_tokens, tf.int32))
        batch_size = tf.shape(encoder_tokens)[0]

        def run():
            outputs = unchecked(_at_least_one_position(encoder_tokens, pad_id))
            return {key: outputs[key] for key in specs}

        def empty():
            # (0, max_length) tokens, (0,) scores
            return {
                key: tf.zeros([0] + [d or 0 for d in spec.shape[1:]], spec.dtype)
                for key, spec in specs.items()
            }

        return tf.cond(batch_size > 0, run, empty)

    return generate


def _add_checked_endpoint(archive, name, function, input_signature):
    endpoint = tf.function(function, input_signature=input_signature)
    endpoint.get_concrete_function()  # traced now, under the StableHLO patch
    archive.add_endpoint(name, endpoint)


def _add_checked_ids_endpoint(archive, name, function, shapes):
    """A checked endpoint of int32 ids whose Python function also takes int64.

    The SavedModel signature (what TF Serving calls) holds the first trace,
    int32; `loaded.<name>(...)` also accepts int64 ids (NumPy's default
    integer), checked in int64 and then cast.
    """
    endpoint = tf.function(function)
    for dtype in (tf.int32, tf.int64):  # traced now, under the StableHLO patch
        endpoint.get_concrete_function(*[tf.TensorSpec(s, dtype) for s in shapes])
    archive.add_endpoint(name, endpoint)


def _add_model_endpoints(archive, model, tokenizer, settings):
    """`logits` and `generate_*`, each also `unchecked_*`.

    Returns:
        dict source bucket (or `None`) -> the unchecked `generate` endpoint.
    """
    endpoint_options = {}
    if keras.backend.backend() == "jax":
        jax2tf_kwargs = {"with_gradient": False}
        if settings.jax_platforms is not None:
            jax2tf_kwargs["native_serialization_platforms"] = settings.jax_platforms
        endpoint_options["jax2tf_kwargs"] = jax2tf_kwargs
    tokens = keras.InputSpec(shape=(None, None), dtype="int32")
    unchecked = archive.add_endpoint(
        "unchecked_logits",
        _logits_function(model),
        input_signature=[tokens, tokens],
        **endpoint_options,
    )
    _add_checked_ids_endpoint(
        archive, "logits", _checked_logits(model, unchecked), [(None, None)] * 2
    )
    generate = {}
    for bucket in settings.source_length_buckets or (None,):
        # Without buckets, one function for every length, capped at the
        # longest source's output length.
        max_length = None
        if bucket is None:
            # Within what the model decodes (`generate` refuses more).
            max_length = min(
                settings.max_source_length + MAX_LENGTH_OFFSET,
                max_length_limit(model)[0],
            )
        name = "generate" if bucket is None else f"generate_{bucket}"
        generate[bucket] = archive.add_endpoint(
            f"unchecked_{name}",
            _decoding_function(model, tokenizer, settings, max_length),
            input_signature=[keras.InputSpec(shape=(None, bucket), dtype="int32")],
            **endpoint_options,
        )
        _add_checked_ids_endpoint(
            archive, name, _checked_generate(model, generate[bucket]), [(None, bucket)]
        )
    return generate


def _add_text_endpoints(archive, tokenizer, generate, settings):
    """`tokenize` and `serving_default`: strings in, ids or texts out."""
    text = _TextFunctions(
        tokenizer,
        generate,
        settings.max_source_length,
        settings.source_length_buckets,
        settings.batch_size_buckets,
    )
    # Any shape: `_one_dimensional` checks the rank in the graph.
    strings = [tf.TensorSpec(shape=None, dtype=tf.string, name="sentences")]
    _add_checked_endpoint(archive, "tokenize", text.tokenize, strings)
    _add_checked_endpoint(archive, "serving_default", text.translate, strings)


def _write_assets(directory, tokenizer, settings, signatures):
    """The tokenizer's files and the export's settings in `assets.extra/`."""
    extra = directory / "assets.extra"
    tokenizer.save(extra / "tokenizer")
    description = {
        "strategy": settings.strategy,
        **settings.search_options,
        "max_source_length": settings.max_source_length,
        "source_length_buckets": settings.source_length_buckets,
        "batch_size_buckets": settings.batch_size_buckets,
        "max_output_length": f"source bucket + {MAX_LENGTH_OFFSET}",
        "keras_backend": keras.backend.backend(),
        "keras_version": keras.__version__,
        "tensorflow_version": tf.__version__,
        "signatures": signatures,
    }
    (extra / CONFIG_FILE).write_text(json.dumps(description, indent=2) + "\n")


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
    overwrite=True,
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
        - `unchecked_logits`, `unchecked_generate_<bucket>`: the same
          without the input checks below (`serving_default` calls them:
          its ids come from the tokenizer, valid by construction).

    Input checks: a signature call with the wrong dtype (float ids, int64
    ids through `signatures[...]`) is refused by the signature itself; the
    functions `loaded.logits` and `loaded.generate_*` take int32 or int64
    ids. Inside the graph, `serving_default` and `tokenize` check that
    `sentences` is 1-D; `logits` and `generate_*` check that every id lies
    in `[0, vocabulary_size)`, that both inputs of `logits` have the same
    batch size, and (learned positions) that no sequence is longer than the
    model's `max_sequence_length`; a failed check raises
    `tf.errors.InvalidArgumentError` whose message names the input and what
    was expected, on every backend (a compiled call cannot raise otherwise:
    an id out of range would give a silent result). An empty batch gives
    empty outputs, an empty `decoder_tokens` empty logits, and an empty
    `encoder_tokens` reads as one padding position (jax2tf functions refuse
    a dimension of size 0, so the checked endpoints never pass one on).

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
        overwrite: bool, whether to replace a previous export at
            `directory`; `False` refuses an existing `directory` with a
            `FileExistsError`. A file, or a folder holding other files than
            an export, is never replaced. Defaults to `True`, as
            `model.save`.

    The SavedModel is written to a hidden folder beside `directory` and
    renamed into place when complete: a process killed during the export
    leaves the previous export (or nothing), never a partial one.

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
    # Every argument is checked before any work, by the check that
    # `export_onnx_translator` shares.
    arguments = check_translator_export(SAVED_MODEL, locals())
    settings = _ExportSettings(
        arguments.strategy,
        arguments.search_options,
        arguments.max_source_length,
        *_check_padding(
            arguments.max_source_length, source_length_buckets, batch_size_buckets
        ),
        jax_platforms=_check_jax_platforms(jax_platforms, keras.backend.backend()),
    )
    verbose = check_bool(verbose, "verbose")
    if keras.backend.backend() == "torch":
        export_directory(
            arguments.directory,
            lambda partial: export_in_tensorflow_process(
                model,
                tokenizer,
                partial,
                strategy=settings.strategy,
                **settings.search_options,
                max_source_length=settings.max_source_length,
                source_length_buckets=settings.source_length_buckets,
                batch_size_buckets=settings.batch_size_buckets,
                verbose=verbose,
                overwrite=True,  # `partial`: the empty folder made for it
            ),
            _check_saved_model,
        )
        return arguments.directory.resolve()
    return export_directory(
        arguments.directory,
        lambda partial: _write(partial, model, tokenizer, settings, verbose),
        _check_saved_model,
    )


def _check_saved_model(partial):
    """Raises `RuntimeError` unless `partial` holds a SavedModel and settings."""
    for name in ("saved_model.pb", f"assets.extra/{CONFIG_FILE}"):
        path = partial / name
        if not path.is_file() or path.stat().st_size == 0:
            raise RuntimeError(
                f"The export wrote no {name}, so the destination was not replaced."
            )


def _write(directory, model, tokenizer, settings, verbose):
    """The SavedModel and its assets, into the (empty) `directory`."""
    archive = keras.export.ExportArchive()
    with tensorflow_compatible_stablehlo():
        archive.track(model)
        archive.track(tokenizer)  # its SentencePiece resource
        generate = _add_model_endpoints(archive, model, tokenizer, settings)
        _add_text_endpoints(archive, tokenizer, generate, settings)
        archive.write_out(str(directory), verbose=verbose)
    generate_names = [f"generate_{b}" if b else "generate" for b in generate]
    signatures = ["serving_default", "tokenize", "logits", *generate_names]
    signatures += [f"unchecked_{name}" for name in ["logits", *generate_names]]
    _write_assets(directory, tokenizer, settings, signatures)
