"""The exported translator SavedModel against the in-process `Translator`.

One tiny model, trained for a few steps, is exported once per backend and
moved to another folder; a fresh Python process that never imports
keras_attn loads it from there (TensorFlow and tensorflow-text only) and
its outputs are compared with the same model's in-process translations.
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
from keras_attn.export.translator_export import CONFIG_FILE
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
result["accepted"] = []
for case in request.get("accepted", []):
    inputs = {
        name: tf.constant(np.reshape(np.asarray(values, case["dtype"]), shape))
        for name, (values, shape) in case["inputs"].items()
    }
    if case["function"]:  # the tf.function: `loaded.logits(encoder, decoder)`
        out = getattr(loaded, case["endpoint"])(*inputs.values())
    else:  # the signature, as TF Serving calls it
        out = loaded.signatures[case["endpoint"]](**inputs)
    result["accepted"].append(
        {k: [list(v.shape), v.numpy().ravel().tolist()] for k, v in out.items()}
    )
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
        timeout=1200,  # a slow machine: the request runs every graph once
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

    # One layer: what is exported (encoder, cached decoder, beam search) is
    # the same per layer, and each layer costs tracing and XLA compilation.
    model = Transformer.from_preset(
        "transformer_tiny",
        vocabulary_size=VOCABULARY_SIZE,
        max_sequence_length=32,
        num_layers=1,
    )
    model.compile(
        optimizer=keras.optimizers.Adam(5e-3),
        loss=MaskedSparseCategoricalCrossentropy(ignore_class=0),
        # XLA took a minute to compile TensorFlow's train step, longer than
        # these 100 tiny steps take in a plain graph.
        jit_compile=False if keras.backend.backend() == "tensorflow" else "auto",
    )
    inputs = {
        "encoder_tokens": ids(sources, suffix=[tokenizer.end_id]),
        "decoder_tokens": ids(targets, prefix=[tokenizer.start_id]),
    }
    labels = ids(targets, suffix=[tokenizer.end_id])
    model.fit(inputs, labels, batch_size=20, epochs=10, verbose=0)
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
def export_folders(tmp_path_factory):
    """`(written, moved)`: where the export is written, and where it is moved."""
    return (
        tmp_path_factory.mktemp("export") / "translator",
        tmp_path_factory.mktemp("moved") / "translator",
    )


@pytest.fixture(scope="module")
def exported(model, tokenizer, export_folders):
    """The export, written over a previous one (`overwrite=True`, the
    default) and moved to another folder before anything loads it."""
    written, moved = export_folders
    written.mkdir()
    (written / "saved_model.pb").write_bytes(b"previous export")
    (written / "stale.txt").write_text("from the previous export")
    export_translator(
        model,
        tokenizer,
        written,
        strategy="beam",
        max_source_length=MAX_SOURCE_LENGTH,
        verbose=False,
        **BEAM,
    )
    shutil.move(written, moved)
    return moved


@pytest.fixture(scope="module")
def served(exported):
    """One fresh process runs every request on the (moved) exported directory."""
    rng = np.random.default_rng(0)
    logits_inputs = {
        "encoder_tokens": rng.integers(4, VOCABULARY_SIZE, (3, 7)).tolist(),
        "decoder_tokens": rng.integers(4, VOCABULARY_SIZE, (3, 5)).tolist(),
    }
    output = load_in_fresh_process(
        exported,
        batches=[mixed_batch(), mixed_batch()[:1], [], ["", " "]],
        tokenize=mixed_batch(),
        logits=logits_inputs,
        refused=[case for case, _ in REFUSED],
        accepted=list(accepted_calls(logits_inputs).values()),
    )
    output["accepted"] = dict(
        zip(accepted_calls(logits_inputs), output["accepted"], strict=True)
    )
    return output, logits_inputs


def _refused(endpoint, dtype="int32", **inputs):
    return {"endpoint": endpoint, "dtype": dtype, "inputs": inputs}


def _accepted(endpoint, dtype="int32", function=False, **arrays):
    """A call expected to work, its inputs by name (in the function's order)."""
    inputs = {
        name: [np.asarray(a).ravel().tolist(), list(np.shape(a))]
        for name, a in arrays.items()
    }
    return {
        "endpoint": endpoint,
        "dtype": dtype,
        "inputs": inputs,
        "function": function,
    }


def accepted_calls(logits_inputs):
    """`{name: call}`: empty batches, empty inputs and int64 ids.

    jax2tf functions refuse a dimension of size 0 ("XlaCallModule shape
    refinement failed"); the checked endpoints never pass one on. A
    signature takes int32 only; the functions also take int64.
    """
    encoder = np.asarray(logits_inputs["encoder_tokens"])
    decoder = np.asarray(logits_inputs["decoder_tokens"])
    source = encoder[:2, :1].repeat(16, axis=1)  # (2, 16)
    return {
        "logits_empty_batch": _accepted(
            "logits", encoder_tokens=np.zeros((0, 3)), decoder_tokens=np.zeros((0, 2))
        ),
        "logits_empty_decoder": _accepted(
            "logits", encoder_tokens=encoder, decoder_tokens=np.zeros((3, 0))
        ),
        "logits_empty_encoder": _accepted(
            "logits", encoder_tokens=np.zeros((3, 0)), decoder_tokens=decoder
        ),
        "logits_padding_encoder": _accepted(
            "logits", encoder_tokens=np.zeros((3, 1)), decoder_tokens=decoder
        ),
        "generate_empty_batch": _accepted(
            "generate_16", encoder_tokens=np.zeros((0, 16))
        ),
        "logits_int64": _accepted(
            "logits", "int64", True, encoder_tokens=encoder, decoder_tokens=decoder
        ),
        "generate_int32": _accepted("generate_16", encoder_tokens=source),
        "generate_int64": _accepted(
            "generate_16", "int64", True, encoder_tokens=source
        ),
    }


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
    # TensorFlow does not check a loaded signature's shapes: a (1, 2) batch
    # came back as one translation before the in-graph rank check.
    (
        _refused("serving_default", "string", sentences=[["A dog.", "A cat."]]),
        ("InvalidArgumentError", r"`sentences` must be a 1-D batch of strings"),
    ),
    (
        _refused("tokenize", "string", sentences="A dog."),
        ("InvalidArgumentError", r"`sentences` must be a 1-D batch of strings"),
    ),
    # A signature holds one dtype: int64 ids go through `loaded.logits`.
    (
        _refused("logits", "int64", encoder_tokens=GOOD, decoder_tokens=GOOD),
        ("InvalidArgumentError", "expected to be a int32 tensor but is a int64"),
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
def test_empty_batches_and_inputs_give_empty_or_padded_outputs(served):
    output, _ = served
    got = output["accepted"]
    assert got["logits_empty_batch"] == {"logits": [[0, 2, VOCABULARY_SIZE], []]}
    assert got["logits_empty_decoder"] == {"logits": [[3, 0, VOCABULARY_SIZE], []]}
    # As wide as a non-empty batch's tokens: (0, max_length).
    width = got["generate_int32"]["tokens"][0][1]
    assert got["generate_empty_batch"] == {
        "tokens": [[0, width], []],
        "scores": [[0], []],
    }
    # An empty source reads as one padding position (masked by the model).
    empty, padding = got["logits_empty_encoder"], got["logits_padding_encoder"]
    assert empty["logits"][0] == [3, 5, VOCABULARY_SIZE]
    np.testing.assert_allclose(empty["logits"][1], padding["logits"][1], atol=1e-6)
    assert np.all(np.isfinite(empty["logits"][1]))


@pytest.mark.slow
def test_int64_ids_are_taken_by_the_functions(served):
    output, _ = served
    got = output["accepted"]
    np.testing.assert_allclose(
        got["logits_int64"]["logits"][1],
        np.ravel(output["logits"]),
        rtol=1e-6,
        atol=1e-6,
    )
    assert got["generate_int64"] == got["generate_int32"]


@pytest.mark.slow
def test_moved_directory_still_loads(export_folders, exported, served):
    """The tokenizer resource and a jax2tf/TF function: nothing points back.

    `served` loaded the export only after it was moved, so every output
    this module checks against the in-process model (translations,
    tokenize, logits) comes from the moved folder.
    """
    output, _ = served
    written, moved = export_folders
    assert exported == moved and not written.exists()
    assert output["batches"][3] == {"translations": ["", ""], "scores": [0.0, 0.0]}


# Argument checks shared by every backend: each case runs on one of them.
@pytest.mark.split_cases
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


def _tiny_model():
    """Untrained, one layer: for the tests of folders, not of translations."""
    return Transformer.from_preset(
        "transformer_tiny", vocabulary_size=VOCABULARY_SIZE, num_layers=1
    )


def test_an_existing_destination_is_refused_before_any_work(tokenizer, tmp_path):
    """Exporting onto a file failed in TensorFlow (FailedPreconditionError)."""
    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / "saved_model.pb").write_bytes(b"old")
    a_file = tmp_path / "model.keras"
    a_file.write_bytes(b"not a folder")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    for directory, overwrite, match in (
        (previous, False, "already exists; pass overwrite=True"),
        (a_file, True, "is an existing file, not a folder"),
        (run_dir, True, "holds files but no saved_model.pb"),
    ):
        with pytest.raises(FileExistsError, match=match) as error:
            export_translator(
                _tiny_model(), tokenizer, directory, overwrite=overwrite, verbose=False
            )
        assert f"directory={str(directory)!r}" in str(error.value)
    assert (previous / "saved_model.pb").read_bytes() == b"old"
    assert a_file.read_bytes() == b"not a folder"
    assert sorted(p.name for p in run_dir.iterdir()) == ["config.json"]
    with pytest.raises(TypeError, match="Received: overwrite='yes'"):
        export_translator(_tiny_model(), tokenizer, tmp_path / "x", overwrite="yes")
    assert sorted(p.name for p in tmp_path.iterdir()) == [
        "model.keras",
        "previous",
        "run",
    ]


# Runs in a fresh interpreter: exports onto a previous export, to be killed.
EXPORT_OVER = """
import sys
from pathlib import Path
import keras
from keras_attn.export import export_translator
from keras_attn.text import SubwordTokenizer
work = Path(sys.argv[1])
model = keras.saving.load_model(work / "model.keras")
tokenizer = SubwordTokenizer.load(work / "tokenizer")
export_translator(model, tokenizer, work / "exports" / "translator",
                  strategy="greedy", source_length_buckets=None,
                  batch_size_buckets=None, verbose=False)
"""


@pytest.mark.slow
# The folder swap is the same on every backend (atomic_export.py): side by
# side it runs on JAX, where the export to kill starts soonest.
@pytest.mark.split_backend("jax")
def test_a_killed_export_leaves_the_previous_one_whole(tokenizer, tmp_path):
    """SIGKILL while the new SavedModel is written: the old one is untouched.

    On torch the export runs in a TensorFlow child process: the whole
    process group is killed.
    """
    import signal
    import time

    _tiny_model().save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "tokenizer")
    exports = tmp_path / "exports"
    previous = exports / "translator"
    previous.mkdir(parents=True)
    files = {"saved_model.pb": b"previous export", "assets.extra/x.json": b"{}"}
    for name, content in files.items():
        (previous / name).parent.mkdir(parents=True, exist_ok=True)
        (previous / name).write_bytes(content)
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    repo = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    env["PYTHONPATH"] = os.pathsep.join([repo, env.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-c", EXPORT_OVER, str(tmp_path)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + 300
        # Killed once the new export has started writing files beside.
        while not any(p.is_file() for p in exports.glob(".partial-*/**/*")):
            assert process.poll() is None, process.stderr.read().decode()[-3000:]
            assert time.monotonic() < deadline, "the export never started"
            time.sleep(0.02)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()
    for name, content in files.items():
        assert (previous / name).read_bytes() == content
    assert sorted(p.name for p in previous.rglob("*")) == sorted(
        ["saved_model.pb", "assets.extra", "x.json"]
    )


@pytest.mark.slow
def test_overwrite_replaces_a_previous_export_whole(export_folders, exported):
    """`exported` was written over a previous export, then moved whole."""
    written, _ = export_folders
    assert not (exported / "stale.txt").exists()  # replaced, not merged
    assert (exported / "saved_model.pb").read_bytes() != b"previous export"
    settings = json.loads((exported / "assets.extra" / CONFIG_FILE).read_text())
    assert settings["strategy"] == "beam"  # the previous export had none
    assert list(written.parent.iterdir()) == []  # nothing was left beside
