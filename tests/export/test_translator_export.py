"""The exported translator SavedModel against the in-process `Translator`.

One tiny model, trained for a few steps, is exported once per backend; a
fresh Python process that never imports keras_attn loads it (TensorFlow and
tensorflow-text only) and its outputs are compared with the same model's
in-process translations.
"""

import json
import os
import re
import shutil
import subprocess
import sys
import warnings

import keras
import numpy as np
import pytest

from keras_attn.export import default_source_length_buckets, export_translator
from keras_attn.models import Transformer
from keras_attn.text import SubwordTokenizer, Translator, load_multi30k
from keras_attn.training import MaskedSparseCategoricalCrossentropy

VOCABULARY_SIZE = 200
MAX_SOURCE_LENGTH = 24
BUCKETS = (16, 24)  # what "auto" gives for MAX_SOURCE_LENGTH
BEAM = dict(beam_size=2, length_penalty_alpha=0.6)
TOO_LONG = "A man in a blue shirt is riding a bike " * 8

# Runs in a fresh interpreter: TensorFlow and tensorflow-text only.
LOAD_AND_RUN = """
import json, sys
import numpy as np
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the SentencePiece ops)

request = json.loads(sys.stdin.read())
loaded = tf.saved_model.load(request["directory"])
serve = loaded.signatures["serving_default"]
result = {"batches": []}
for sentences in request["batches"]:
    out = serve(sentences=tf.constant(sentences, tf.string))
    result["batches"].append({
        "translations": [t.decode("utf-8") for t in out["translations"].numpy()],
        "scores": out["scores"].numpy().tolist(),
    })
if "tokenize" in request:
    out = loaded.signatures["tokenize"](sentences=tf.constant(request["tokenize"]))
    result["tokenize"] = {k: v.numpy().tolist() for k, v in out.items()}
if "logits" in request:
    inputs = {k: tf.constant(v, tf.int32) for k, v in request["logits"].items()}
    result["logits"] = loaded.signatures["logits"](**inputs)["logits"].numpy().tolist()
result["refused"] = []
for case in request.get("refused", []):
    inputs = {k: tf.constant(v, case["dtype"]) for k, v in case["inputs"].items()}
    try:
        loaded.signatures[case["endpoint"]](**inputs)
        result["refused"].append(None)
    except Exception as error:  # the type and message are what is tested
        result["refused"].append([type(error).__name__, str(error)])
result["signatures"] = sorted(loaded.signatures)
result["imported_keras_attn"] = any(m.startswith("keras_attn") for m in sys.modules)
print(json.dumps(result))
"""


def load_in_fresh_process(directory, **request):
    """Loads `directory` in a new interpreter and runs `request` there."""
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "KERAS_BACKEND")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [sys.executable, "-c", LOAD_AND_RUN],
        input=json.dumps({"directory": str(directory), **request}),
        capture_output=True,
        text=True,
        env=env,
        cwd=directory.parent,  # not the repository: keras_attn is not importable
        timeout=300,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    output = json.loads(result.stdout.strip().splitlines()[-1])
    assert not output["imported_keras_attn"]
    return output


def mixed_batch():
    """17 sentences of different lengths, an empty one and an over-long one."""
    sources, _ = load_multi30k("val")
    return sources[:15] + ["", TOO_LONG]


@pytest.fixture(scope="module")
def tokenizer():
    sources, targets = load_multi30k("train")
    return SubwordTokenizer.train(
        sources[:200] + targets[:200], vocabulary_size=VOCABULARY_SIZE
    )


@pytest.fixture(scope="module")
def model(tokenizer):
    """A tiny Transformer after a few steps of training: it learns to end."""
    keras.utils.set_random_seed(0)
    sources, targets = load_multi30k("train")
    length = 24

    def ids(sentences, prefix=(), suffix=()):
        rows = [
            list(prefix) + row[: length - 1] + list(suffix)
            for row in tokenizer.tokenize(sentences[:200]).to_list()
        ]
        dense = np.zeros((len(rows), length), "int32")
        for i, row in enumerate(rows):
            dense[i, : min(len(row), length)] = row[:length]
        return dense

    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, max_sequence_length=32
    )
    model.compile(
        optimizer=keras.optimizers.Adam(5e-3),
        loss=MaskedSparseCategoricalCrossentropy(ignore_class=0),
    )
    inputs = {
        "encoder_tokens": ids(sources, suffix=[tokenizer.end_id]),
        "decoder_tokens": ids(targets, prefix=[tokenizer.start_id]),
    }
    labels = ids(targets, suffix=[tokenizer.end_id])
    model.fit(inputs, labels, batch_size=20, epochs=6, verbose=0)
    return model


def translator(model, tokenizer, source_bucket):
    """The in-process reference, padding sources to the export's bucket."""
    return Translator(
        model,
        tokenizer,
        strategy="beam",
        max_source_length=MAX_SOURCE_LENGTH,
        length_multiple=source_bucket,
        **BEAM,
    )


@pytest.fixture(scope="module")
def in_process(model, tokenizer):
    """The mixed batch translated in process: `(texts, scores)`."""
    reference = translator(model, tokenizer, source_bucket=24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")  # the truncation warning
        texts = reference.translate(mixed_batch())
        _, scores = reference.translate_ids(mixed_batch())
    return texts, scores


@pytest.fixture(scope="module")
def exported(model, tokenizer, tmp_path_factory):
    directory = tmp_path_factory.mktemp("export") / "translator"
    export_translator(
        model,
        tokenizer,
        directory,
        strategy="beam",
        max_source_length=MAX_SOURCE_LENGTH,
        verbose=False,
        **BEAM,
    )
    return directory


@pytest.fixture(scope="module")
def served(exported):
    """One fresh process runs every request on the exported directory."""
    rng = np.random.default_rng(0)
    logits_inputs = {
        "encoder_tokens": rng.integers(4, VOCABULARY_SIZE, (3, 7)).tolist(),
        "decoder_tokens": rng.integers(4, VOCABULARY_SIZE, (3, 5)).tolist(),
    }
    output = load_in_fresh_process(
        exported,
        batches=[mixed_batch(), mixed_batch()[:1], []],
        tokenize=mixed_batch(),
        logits=logits_inputs,
        refused=[case for case, _ in REFUSED],
    )
    return output, logits_inputs


def _refused(endpoint, dtype="int32", **inputs):
    return {"endpoint": endpoint, "dtype": dtype, "inputs": inputs}


GOOD = [[5, 6, 7], [8, 9, 10]]
# Calls of the reloaded SavedModel with bad inputs, and the error each gives:
# the in-graph checks answer with InvalidArgumentError naming the input and
# what was expected (never a bare "Graph execution error", never a silent
# NaN on JAX); a wrong dtype or width is refused by the signature itself.
REFUSED = [
    (
        _refused("logits", encoder_tokens=[[5, VOCABULARY_SIZE]], decoder_tokens=[[5]]),
        (
            "InvalidArgumentError",
            r"`encoder_tokens` must hold token ids in \[0, "
            rf"vocabulary_size={VOCABULARY_SIZE}\)",
        ),
    ),
    (
        _refused("logits", encoder_tokens=[[5, 6]], decoder_tokens=[[-1, 5]]),
        ("InvalidArgumentError", r"`decoder_tokens` must hold token ids in \[0, "),
    ),
    (
        _refused("logits", encoder_tokens=GOOD, decoder_tokens=GOOD[:1]),
        (
            "InvalidArgumentError",
            "`encoder_tokens` and `decoder_tokens` must have the same batch size",
        ),
    ),
    (
        _refused("generate_16", encoder_tokens=[[5] * 15 + [10_000]]),
        ("InvalidArgumentError", r"`encoder_tokens` must hold token ids in \[0, "),
    ),
    (
        _refused("logits", "float32", encoder_tokens=GOOD, decoder_tokens=GOOD),
        ("(TypeError|ValueError|InvalidArgumentError)", "int32"),
    ),
    (
        _refused("generate_16", encoder_tokens=[[5] * 20]),
        ("(TypeError|ValueError|InvalidArgumentError)", "16"),
    ),
]


def test_default_buckets():
    assert default_source_length_buckets(24) == BUCKETS
    assert default_source_length_buckets(256) == (16, 32, 64, 128, 256)
    assert default_source_length_buckets(100) == (16, 32, 64, 100)
    assert default_source_length_buckets(16) == (16,)


@pytest.mark.slow
def test_signatures_and_assets(exported, served, tokenizer):
    output, _ = served
    public = ["serving_default", "tokenize", "logits", "generate_16", "generate_24"]
    unchecked = ["unchecked_logits", "unchecked_generate_16", "unchecked_generate_24"]
    assert output["signatures"] == sorted(public + unchecked)
    extra = exported / "assets.extra"
    assert SubwordTokenizer.load(extra / "tokenizer").model_proto == (
        tokenizer.model_proto
    )
    settings = json.loads((extra / "translator_export.json").read_text())
    assert settings["source_length_buckets"] == list(BUCKETS)
    if keras.backend.backend() == "torch":
        # Exported by a TensorFlow-backend process from the torch weights.
        assert settings["keras_backend"] == "tensorflow"
        assert settings["trained_on_backend"] == "torch"
    else:
        assert settings["keras_backend"] == keras.backend.backend()


@pytest.mark.slow
def test_batch_of_17_equals_in_process_translation(served, in_process):
    output, _ = served
    texts, scores = in_process
    got = output["batches"][0]
    assert got["translations"] == texts
    np.testing.assert_allclose(got["scores"], scores, rtol=1e-4, atol=1e-4)
    # The model has learned to stop: translations differ in length.
    assert len({len(text) for text in texts if text}) > 1


@pytest.mark.slow
def test_empty_and_over_long_sentences(served):
    output, _ = served
    got = output["batches"][0]
    assert got["translations"][-2] == "" and got["scores"][-2] == 0.0
    assert got["translations"][-1] != "" and got["scores"][-1] < 0.0


@pytest.mark.slow
def test_batch_of_1_and_empty_batch(served, in_process):
    output, _ = served
    texts, scores = in_process
    # Alone, the first sentence pads to the 16 bucket, not 24: same output,
    # as the translation ends long before either length limit.
    assert output["batches"][1]["translations"] == texts[:1]
    np.testing.assert_allclose(output["batches"][1]["scores"], scores[:1], atol=1e-4)
    assert output["batches"][2] == {"translations": [], "scores": []}


@pytest.mark.slow
def test_tokenize_truncates_and_pads_to_the_bucket(served, model, tokenizer):
    output, _ = served
    sentences = mixed_batch()
    expected = translator(model, tokenizer, 24)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        ids = expected.encode_sources(sentences)
    token_ids = np.asarray(output["tokenize"]["token_ids"])
    assert token_ids.shape == (17, 24)
    assert output["tokenize"]["lengths"] == [len(row) for row in ids]
    assert max(len(row) for row in ids) == MAX_SOURCE_LENGTH  # TOO_LONG, cut
    for row, reference in zip(token_ids, ids):
        assert row.tolist() == reference + [0] * (24 - len(reference))


@pytest.mark.slow
def test_logits_endpoint_equals_the_keras_model(served, model):
    output, logits_inputs = served
    inputs = {k: np.asarray(v, "int32") for k, v in logits_inputs.items()}
    expected = np.asarray(model.predict_on_batch(inputs))
    got = np.asarray(output["logits"], "float32")
    assert got.shape == expected.shape == (3, 5, VOCABULARY_SIZE)
    assert np.abs(got - expected).max() <= 1e-4


@pytest.mark.slow
@pytest.mark.parametrize("index", range(len(REFUSED)))
def test_bad_inputs_of_the_saved_model_are_refused_clearly(served, index):
    output, _ = served
    (error_type, message), got = REFUSED[index][1], output["refused"][index]
    assert got is not None, f"{REFUSED[index][0]} was accepted"
    assert re.fullmatch(error_type, got[0]), got
    # TensorFlow's message starts "Graph execution error:"; ours follows it.
    assert re.search(message, got[1]), got


@pytest.mark.slow
def test_moved_directory_still_loads(exported, served, tmp_path):
    output, logits_inputs = served
    moved = tmp_path / "moved"
    shutil.move(exported, moved)
    try:
        # The tokenizer resource and a jax2tf/TF function: nothing points back.
        again = load_in_fresh_process(
            moved, batches=[["", " "]], tokenize=mixed_batch(), logits=logits_inputs
        )
    finally:
        shutil.move(moved, exported)
    assert again["batches"][0] == {"translations": ["", ""], "scores": [0.0, 0.0]}
    assert again["tokenize"] == output["tokenize"]
    np.testing.assert_allclose(again["logits"], output["logits"], atol=1e-6)


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        (dict(strategy="sample"), ValueError, "strategy='sample'"),
        (dict(beam_size=0), ValueError, "beam_size=0"),
        (dict(max_source_length=1), ValueError, "max_source_length=1"),
        (dict(source_length_buckets=(8, 16)), ValueError, "max_source_length=24"),
        (
            dict(source_length_buckets=(0, 24)),
            ValueError,
            r"source_length_buckets=\(0, 24\)",
        ),
        # A wrong type is a TypeError, a wrong value a ValueError.
        (dict(batch_size_buckets=8), TypeError, "batch_size_buckets=8"),
        (dict(beam_size=True), TypeError, "beam_size=True"),
        (dict(length_penalty_alpha=float("nan")), ValueError, "alpha=nan"),
        (dict(max_source_length="24"), TypeError, "max_source_length='24'"),
        (
            dict(batch_size_buckets=(2, 2.5)),
            TypeError,
            r"batch_size_buckets=\(2, 2.5\)",
        ),
        (dict(verbose="no"), TypeError, "verbose='no'"),
        (dict(directory=123), TypeError, "directory=123"),
    ],
)
def test_invalid_arguments_are_named(kwargs, error, match, tokenizer, tmp_path):
    model = Transformer.from_preset("transformer_tiny", vocabulary_size=VOCABULARY_SIZE)
    kwargs = {
        "max_source_length": MAX_SOURCE_LENGTH,
        "directory": tmp_path / "x",
        **kwargs,
    }
    with pytest.raises(error, match=match):
        export_translator(model, tokenizer, **kwargs)
    assert not (tmp_path / "x").exists()


def test_vocabulary_mismatch_is_named(tokenizer, tmp_path):
    model = Transformer.from_preset("transformer_tiny", vocabulary_size=50)
    with pytest.raises(ValueError, match="model.vocabulary_size=50"):
        export_translator(model, tokenizer, tmp_path / "x")
