"""Issue #49, round 4: exports that cannot be half-done, one argument check
for both translator exporters, the ONNX opset range, and an ONNX client
that checks every file of the folder it serves.

Cheap by design: the translator's refusals and the client's checks need no
conversion (the client reads `tokenizer.model` and `translator.json`
before the graph, and a hand-made ONNX graph stands in for the decoding
loop); each real conversion here is of a tiny model, and the two kills run
in real subprocesses.
"""

import errno
import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import keras
import pytest

onnx = pytest.importorskip("onnx")
pytest.importorskip("onnxruntime")
pytest.importorskip("sentencepiece")

from keras_attn.export import (  # noqa: E402
    export_litert,
    export_onnx,
    export_onnx_translator,
    export_translator,
    onnx_export,
)
from keras_attn.export import onnx_translator as client  # noqa: E402
from keras_attn.models import Transformer, TransformerLM  # noqa: E402
from keras_attn.text import SubwordTokenizer, load_multi30k  # noqa: E402

BACKEND = keras.backend.backend()
VOCABULARY_SIZE = 120
REPOSITORY = Path(__file__).resolve().parents[2]
on_tensorflow = pytest.mark.skipif(
    BACKEND != "tensorflow", reason="the translator's ONNX export runs on TensorFlow"
)
converts_onnx = pytest.mark.skipif(
    BACKEND == "jax", reason="jax2onnx does not convert these models (JAX test)"
)


@pytest.fixture(scope="module")
def tokenizer():
    sources, targets = load_multi30k("train")
    return SubwordTokenizer.train(
        sources[:200] + targets[:200], vocabulary_size=VOCABULARY_SIZE
    )


def tiny_transformer(**overrides):
    options = dict(
        vocabulary_size=VOCABULARY_SIZE,
        num_layers=1,
        hidden_dim=8,
        num_heads=2,
        intermediate_dim=16,
        max_sequence_length=16,
        position="learned",
    )
    return Transformer(**{**options, **overrides})


def tiny_lm():
    """One layer: the conversions here are of files, not of the layers."""
    return TransformerLM.from_preset("lm_tiny", vocabulary_size=20, num_layers=1)


def snapshot(folder):
    """Every file under `folder` (hidden ones included) -> its bytes."""
    return {
        str(path.relative_to(folder)): path.read_bytes()
        for path in sorted(Path(folder).rglob("*"))
        if path.is_file()
    }


def previous_translator_export(folder):
    """A stand-in previous ONNX translator export at `folder`."""
    folder.mkdir(parents=True)
    (folder / "translator.onnx").write_bytes(b"previous graph")
    (folder / "tokenizer.model").write_bytes(b"previous tokenizer")
    (folder / "translator.json").write_text('{"previous": true}\n')
    return snapshot(folder)


# === One argument check for both translator exporters ===

EXPORTERS = {
    "export_translator": export_translator,
    "export_onnx_translator": export_onnx_translator,
}


def _call(exporter, model, tokenizer, directory, **kwargs):
    if exporter == "export_translator":
        kwargs.setdefault("verbose", False)
    return EXPORTERS[exporter](model, tokenizer, directory, **kwargs)


REFUSALS = {
    "no tokenizer": (
        dict(tokenizer=None),
        TypeError,
        "`tokenizer` must be a `keras_attn.text.SubwordTokenizer` .* "
        "Received: tokenizer=None",
    ),
    "tokenizer of another vocabulary": (
        dict(model=dict(vocabulary_size=50)),
        ValueError,
        "disagree on the vocabulary size. Received: "
        "tokenizer.vocabulary_size=120, model.vocabulary_size=50",
    ),
    "another padding id": (
        dict(model=dict(pad_id=1)),
        ValueError,
        "disagree on the padding id.* tokenizer.pad_id=0, model.pad_id=1",
    ),
    "not a Transformer": (
        dict(model="lm"),
        TypeError,
        "`model` must be a `keras_attn.models.Transformer`",
    ),
    "beyond the learned positions": (
        dict(max_source_length=17),
        ValueError,
        "at most the model's max_sequence_length=16 with learned positions. "
        "Received: max_source_length=17",
    ),
    "one source id": (dict(max_source_length=1), ValueError, "max_source_length=1"),
    "unknown strategy": (dict(strategy="sample"), ValueError, "strategy='sample'"),
    "no beams": (dict(strategy="beam", beam_size=0), ValueError, "beam_size=0"),
    "nan length penalty": (
        dict(strategy="beam", length_penalty_alpha=float("nan")),
        ValueError,
        "alpha=nan",
    ),
    "directory of another type": (dict(directory=123), TypeError, "directory=123"),
    "overwrite of another type": (dict(overwrite="yes"), TypeError, "overwrite='yes'"),
}


@pytest.mark.parametrize("case", list(REFUSALS))
@pytest.mark.parametrize("exporter", list(EXPORTERS))
def test_both_translator_exporters_refuse_the_same_arguments(
    exporter, case, tokenizer, tmp_path
):
    """`export_onnx_translator` took another vocabulary's tokenizer, `None`
    (`AttributeError`) and a `max_source_length` beyond the learned
    positions (failing later in ONNX Runtime); now one check serves both."""
    if exporter == "export_onnx_translator" and BACKEND != "tensorflow":
        pytest.skip("export_onnx_translator refuses other backends first")
    arguments, error, match = REFUSALS[case]
    arguments = dict(arguments)
    model = arguments.pop("model", {})
    model = tiny_lm() if model == "lm" else tiny_transformer(**model)
    given_tokenizer = arguments.pop("tokenizer", tokenizer)
    directory = arguments.pop("directory", tmp_path / "export")

    def refusal(name):
        with pytest.raises(error, match=match) as refused:
            _call(name, model, given_tokenizer, directory, **arguments)
        return str(refused.value)

    message = refusal(exporter)
    assert list(tmp_path.iterdir()) == []  # nothing written
    if exporter == "export_onnx_translator":
        assert message == refusal("export_translator")  # word for word


@pytest.mark.parametrize(
    "exporter, writes, marker",
    [
        ("export_translator", "a SavedModel folder", "saved_model.pb"),
        ("export_onnx_translator", "an ONNX translator folder", "translator.onnx"),
    ],
)
def test_both_translator_exporters_refuse_a_destination_they_must_not_replace(
    exporter, writes, marker, tokenizer, tmp_path
):
    if exporter == "export_onnx_translator" and BACKEND != "tensorflow":
        pytest.skip("export_onnx_translator refuses other backends first")
    a_file = tmp_path / "model.keras"
    a_file.write_bytes(b"not a folder")
    run_dir = tmp_path / "run"
    run_dir.mkdir()
    (run_dir / "config.json").write_text("{}")
    previous = tmp_path / "previous"
    previous.mkdir()
    (previous / marker).write_bytes(b"old")
    for directory, overwrite, match in (
        (a_file, True, f"an existing file, not a folder; {exporter} writes {writes}"),
        (run_dir, True, f"holds files but no {marker}: {exporter} replaces only"),
        (previous, False, "already exists; pass overwrite=True"),
    ):
        with pytest.raises(FileExistsError, match=match):
            _call(
                exporter, tiny_transformer(), tokenizer, directory, overwrite=overwrite
            )
    before = snapshot(tmp_path)
    assert before == {
        "model.keras": b"not a folder",
        "run/config.json": b"{}",
        f"previous/{marker}": b"old",
    }


# === Atomic exports ===


def _no_space(*args, **kwargs):
    raise OSError(errno.ENOSPC, "No space left on device")


@converts_onnx
def test_a_full_disk_leaves_the_previous_onnx_file_whole(tmp_path, monkeypatch):
    """On a full disk `export_onnx` truncated the previous file.

    The new file is converted and written in full beside it; the disk fills
    when it is flushed (`fsync`, where delayed allocation reports ENOSPC).
    """
    if BACKEND == "tensorflow":
        pytest.importorskip("tf2onnx")
    path = tmp_path / "lm.onnx"
    path.write_bytes(b"previous export")
    model = tiny_lm()
    monkeypatch.setattr(os, "fsync", _no_space)
    with pytest.raises(OSError, match="No space left on device"):
        export_onnx(model, path)
    assert snapshot(tmp_path) == {"lm.onnx": b"previous export"}  # no partial file


def fake_converter(content):
    """A `Model.export` that writes `content`, as a converter would."""

    def export(self, filepath, *args, **kwargs):
        Path(filepath).write_bytes(content)

    return export


@pytest.mark.skipif(BACKEND != "tensorflow", reason="LiteRT exports from TensorFlow")
def test_litert_writes_beside_and_checks_before_replacing(tmp_path, monkeypatch):
    """`export_litert` wrote in place; it goes through the same helper now."""
    path = tmp_path / "lm.tflite"
    path.write_bytes(b"previous export")
    model = tiny_lm()
    monkeypatch.setattr(type(model), "export", fake_converter(b"1234TFL3 new model"))
    with monkeypatch.context() as patch:
        patch.setattr(os, "fsync", _no_space)
        with pytest.raises(OSError, match="No space left on device"):
            export_litert(model, path, batch_size=2, sequence_length=5)
    assert snapshot(tmp_path) == {"lm.tflite": b"previous export"}
    monkeypatch.setattr(type(model), "export", fake_converter(b"truncated"))
    with pytest.raises(RuntimeError, match="not a LiteRT model"):
        export_litert(model, path, batch_size=2, sequence_length=5)
    assert snapshot(tmp_path) == {"lm.tflite": b"previous export"}
    monkeypatch.setattr(type(model), "export", fake_converter(b"1234TFL3 new model"))
    export_litert(model, path, batch_size=2, sequence_length=5)
    assert snapshot(tmp_path) == {"lm.tflite": b"1234TFL3 new model"}


@converts_onnx
def test_a_file_the_checker_refuses_replaces_nothing(tmp_path, monkeypatch):
    """A converter that writes a truncated file without an error."""
    path = tmp_path / "lm.onnx"
    path.write_bytes(b"previous export")
    model = tiny_lm()
    truncated = echo_graph()[:40]
    monkeypatch.setattr(type(model), "export", fake_converter(truncated))
    # Fixed shapes: Keras's own export on every backend.
    with pytest.raises(RuntimeError, match="ONNX checker refuses, so .*lm.onnx"):
        export_onnx(model, path, batch_size=2, sequence_length=5)
    assert snapshot(tmp_path) == {"lm.onnx": b"previous export"}
    monkeypatch.setattr(type(model), "export", fake_converter(echo_graph()))
    export_onnx(model, path, batch_size=2, sequence_length=5)
    assert snapshot(tmp_path) == {"lm.onnx": echo_graph()}


@on_tensorflow
def test_a_write_error_in_the_graph_leaves_the_previous_translator_whole(
    tokenizer, tmp_path, monkeypatch
):
    """It used to leave a half-written graph beside the old tokenizer and json."""
    folder = tmp_path / "translator"
    before = previous_translator_export(folder)

    def export_half_then_fail(self, filepath, *args, **kwargs):
        Path(filepath).write_bytes(b"half a graph")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(onnx_export._DecodingGraph, "export", export_half_then_fail)
    with pytest.raises(OSError, match="No space left on device"):
        export_onnx_translator(tiny_transformer(), tokenizer, folder)
    assert snapshot(tmp_path) == {f"translator/{k}": v for k, v in before.items()}


# Runs in a fresh interpreter: flushing the new file is where it is killed.
PAUSE_AT_FLUSH = """
import os, sys, time
from pathlib import Path
real_fsync = os.fsync

def paused_fsync(descriptor):
    if ".partial-" in os.readlink(f"/proc/self/fd/{descriptor}"):
        Path(sys.argv[2]).write_text("written")  # the new file, not yet in place
        time.sleep(600)
    real_fsync(descriptor)

os.fsync = paused_fsync
from keras_attn.export import export_onnx
from keras_attn.models import TransformerLM
model = TransformerLM.from_preset("lm_tiny", vocabulary_size=20, num_layers=1)
export_onnx(model, sys.argv[1])
"""

# Runs in a fresh interpreter: exports a translator over a previous one.
ONNX_TRANSLATOR_OVER = """
import sys
from pathlib import Path
import keras
from keras_attn.export import export_onnx_translator
from keras_attn.text import SubwordTokenizer
work = Path(sys.argv[1])
export_onnx_translator(keras.saving.load_model(work / "model.keras"),
                       SubwordTokenizer.load(work / "tokenizer"), work / "translator")
"""


def run_until(script, args, ready, timeout=300):
    """Starts `script` in a fresh Python; SIGKILLs it once `ready()` is true."""
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    env["PYTHONPATH"] = os.pathsep.join([str(REPOSITORY), env.get("PYTHONPATH", "")])
    process = subprocess.Popen(
        [sys.executable, "-c", script, *map(str, args)],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE,
        start_new_session=True,
    )
    try:
        deadline = time.monotonic() + timeout
        while not ready():
            assert process.poll() is None, (
                "the export ended before it was killed: "
                + process.stderr.read().decode()[-3000:]
            )
            assert time.monotonic() < deadline, "the export never got there"
            time.sleep(0.02)
    finally:
        os.killpg(process.pid, signal.SIGKILL)
        process.wait()


@pytest.mark.slow
@converts_onnx
@pytest.mark.skipif(not sys.platform.startswith("linux"), reason="/proc/self/fd")
def test_a_killed_onnx_export_leaves_the_previous_file_whole(tmp_path):
    if BACKEND == "tensorflow":
        pytest.importorskip("tf2onnx")
    path = tmp_path / "exports" / "lm.onnx"
    path.parent.mkdir()
    path.write_bytes(b"previous export")
    written = tmp_path / "written"
    run_until(PAUSE_AT_FLUSH, [path, written], written.exists)
    assert path.read_bytes() == b"previous export"
    # Only the hidden new file beside it, which a kill cannot avoid.
    assert [p.name for p in path.parent.iterdir() if p != path][0].startswith(
        ".partial-"
    )


@pytest.mark.slow
@on_tensorflow
def test_a_killed_translator_export_leaves_the_previous_one_whole(tokenizer, tmp_path):
    """SIGKILL while the graph is converted (the new folder begun beside)."""
    tiny_transformer().save(tmp_path / "model.keras")
    tokenizer.save(tmp_path / "tokenizer")
    folder = tmp_path / "translator"
    before = previous_translator_export(folder)
    run_until(
        ONNX_TRANSLATOR_OVER,
        [tmp_path],
        lambda: any(tmp_path.glob(".partial-*.translator")),
    )
    assert snapshot(folder) == before


# === The ONNX opset range ===


@pytest.mark.parametrize(
    "opset, error",
    [
        (1, ValueError),
        (12, ValueError),
        (26, ValueError),
        (99, ValueError),
        (True, TypeError),
        ("18", TypeError),
        (18.0, TypeError),
    ],
)
def test_opsets_the_converters_write_badly_are_refused(opset, error, tmp_path):
    """`opset_version=1` wrote a file the ONNX checker refuses (TensorFlow),
    or silently opset 18 (torch)."""
    # Checked before any conversion: on JAX too, with or without jax2onnx.
    low, high = onnx_export.OPSET_RANGES[BACKEND]
    with pytest.raises(error) as refused:
        export_onnx(tiny_lm(), tmp_path / "lm.onnx", opset_version=opset)
    assert f"opset_version={opset!r}" in str(refused.value)
    if error is ValueError:
        assert f"[{low}, {high}]" in str(refused.value)
    assert list(tmp_path.iterdir()) == []


def test_export_onnx_refuses_a_folder_and_a_path_of_another_type(tmp_path):
    folder = tmp_path / "lm.onnx"
    folder.mkdir()
    with pytest.raises(FileExistsError, match="`path` is an existing folder"):
        export_onnx(tiny_lm(), folder)
    with pytest.raises(TypeError, match="path=3"):
        export_onnx(tiny_lm(), 3)
    assert [p.name for p in tmp_path.iterdir()] == ["lm.onnx"]


# === The client: every field of translator.json, every file confined ===

VALID_CONFIG = {
    "start_id": 2,
    "end_id": 3,
    "pad_id": 0,
    "max_source_length": 16,
    "length_multiple": 8,
    "strategy": "greedy",
    "beam_size": None,
    "length_penalty_alpha": None,
    "keras_version": "3",
}


def echo_graph():
    """A translator graph that answers each source with itself (opset 13)."""
    helper = onnx.helper
    tokens = helper.make_tensor_value_info(
        "encoder_tokens", onnx.TensorProto.INT32, ["batch", "length"]
    )
    nodes = [
        helper.make_node("Identity", ["encoder_tokens"], ["tokens"]),
        helper.make_node("Cast", ["encoder_tokens"], ["floats"], to=1),
        helper.make_node("ReduceMax", ["floats"], ["scores"], axes=[1], keepdims=0),
    ]
    outputs = [
        helper.make_tensor_value_info(
            "tokens", onnx.TensorProto.INT32, ["batch", "length"]
        ),
        helper.make_tensor_value_info("scores", onnx.TensorProto.FLOAT, ["batch"]),
    ]
    graph = helper.make_graph(nodes, "echo", [tokens], outputs)
    model = helper.make_model(graph, opset_imports=[helper.make_opsetid("", 13)])
    model.ir_version = 8
    return model.SerializeToString()


@pytest.fixture
def folder(tokenizer, tmp_path):
    """A servable folder: the tokenizer, a valid json and the echo graph."""
    folder = tmp_path / "translator"
    folder.mkdir()
    (folder / "tokenizer.model").write_bytes(tokenizer.model_proto)
    (folder / "translator.json").write_text(json.dumps(VALID_CONFIG))
    (folder / "translator.onnx").write_bytes(echo_graph())
    return folder


def test_a_valid_folder_serves(folder):
    translator = client.OnnxTranslator(folder)
    assert translator.translate(["a dog runs", ""]) == ["a dog runs", ""]


def _replace(**fields):
    return json.dumps({**VALID_CONFIG, **fields})


JSON_REFUSALS = {
    # name: (file content, field or None, what the message says)
    "length_multiple 0": (_replace(length_multiple=0), "length_multiple", r"\[1, "),
    "length_multiple 2.0": (_replace(length_multiple=2.0), "length_multiple", "2.0"),
    "huge pad_id": (_replace(pad_id=10**30), "pad_id", r"token id in \[0, 120\)"),
    "negative pad_id": (_replace(pad_id=-1), "pad_id", r"\[0, 120\)"),
    "boolean pad_id": (_replace(pad_id=True), "pad_id", "True"),
    "end_id past the vocabulary": (_replace(end_id=120), "end_id", r"\[0, 120\)"),
    "end_id equal to start_id": (_replace(end_id=2), "end_id", "eos id of"),
    "start_id of another piece": (_replace(start_id=7), "start_id", "bos id"),
    "string for a number": (
        _replace(max_source_length="16"),
        "max_source_length",
        "'16'",
    ),
    "null for a number": (
        _replace(max_source_length=None),
        "max_source_length",
        "None",
    ),
    "one source id": (_replace(max_source_length=1), "max_source_length", r"\[2, "),
    "unknown strategy": (_replace(strategy="sample"), "strategy", "'sample'"),
    "beam_size with greedy": (_replace(beam_size=4), "beam_size", "null with"),
    "beam without beam_size": (
        _replace(strategy="beam", length_penalty_alpha=0.6),
        "beam_size",
        "positive integer with strategy 'beam'",
    ),
    "beam with a string penalty": (
        _replace(strategy="beam", beam_size=2, length_penalty_alpha="0.6"),
        "length_penalty_alpha",
        "finite number",
    ),
    "Infinity": (_replace(length_penalty_alpha=1e400), None, "Infinity is not a JSON"),
    "version of another type": (_replace(keras_version=3), "keras_version", "string"),
    "missing key": (
        json.dumps({k: v for k, v in VALID_CONFIG.items() if k != "end_id"}),
        "end_id",
        r"missing \['end_id'\]",
    ),
    "unknown key": (_replace(end_ids=3), "end_ids", r"unknown \['end_ids'\]"),
    "NaN": (_replace(pad_id=0)[:-1] + ', "x": NaN}', None, "NaN is not a JSON number"),
    "duplicate key": ('{"pad_id": 0, ' + _replace()[1:], None, "more than once"),
    "not UTF-8": (b'{"pad_id": "\xff"}', None, "not UTF-8"),
    "nested too deeply": ("[" * 100_000 + "]" * 100_000, None, "nested too deeply"),
    "not JSON": ("{", None, "not valid JSON"),
    "a list": ("[]", None, "must hold a JSON object"),
    "too large": (" " * (2 << 20) + "{}", None, "expected a small JSON file"),
}


@pytest.mark.parametrize("case", list(JSON_REFUSALS))
def test_every_field_of_translator_json_is_checked(case, folder):
    content, field, match = JSON_REFUSALS[case]
    path = folder / "translator.json"
    if isinstance(content, bytes):
        path.write_bytes(content)
    else:
        path.write_text(content)
    with pytest.raises(ValueError, match=match) as refused:
        client.OnnxTranslator(folder)
    message = str(refused.value)
    assert str(path) in message
    if field is not None:
        assert f"{field}" in message


def test_the_client_follows_no_link_out_of_its_folder(folder, tmp_path):
    outside = tmp_path / "outside"
    outside.mkdir()
    for name in ("translator.json", "tokenizer.model", "translator.onnx"):
        (outside / name).write_bytes((folder / name).read_bytes())
        (folder / name).unlink()
        (folder / name).symlink_to(outside / name)
        with pytest.raises(ValueError, match=f"{name} resolves to .*outside the"):
            client.OnnxTranslator(folder)
        # A link to a file inside the folder is a file of the folder.
        (folder / name).unlink()
        (folder / f"real-{name}").write_bytes((outside / name).read_bytes())
        (folder / name).symlink_to(f"real-{name}")
    assert client.OnnxTranslator(folder).translate(["a dog"]) == ["a dog"]


@pytest.mark.parametrize(
    "name", ["translator.json", "tokenizer.model", "translator.onnx"]
)
def test_the_client_opens_no_special_file(name, folder):
    path = folder / name
    path.unlink()
    os.mkfifo(path)  # reading it would block forever
    with pytest.raises(ValueError, match=f"{name} is not a regular file"):
        client.OnnxTranslator(folder)
    path.unlink()
    path.mkdir()
    with pytest.raises(ValueError, match=f"{name} is not a regular file"):
        client.OnnxTranslator(folder)


@pytest.mark.parametrize(
    "name, content, error, match",
    [
        ("tokenizer.model", None, FileNotFoundError, "tokenizer.model is missing"),
        ("tokenizer.model", b"garbage", ValueError, "is not a SentencePiece model"),
        ("translator.onnx", b"garbage", ValueError, "is not an ONNX model"),
        ("translator.onnx", "lm", ValueError, "is not a translator graph"),
    ],
)
def test_a_graph_or_tokenizer_that_cannot_serve_is_named(
    name, content, error, match, folder
):
    path = folder / name
    if content is None:
        path.unlink()
    elif content == "lm":  # a forward pass: another interface
        graph = onnx.load_from_string(echo_graph())
        graph.graph.input[0].name = "token_ids"
        graph.graph.node[0].input[0] = "token_ids"
        graph.graph.node[1].input[0] = "token_ids"
        path.write_bytes(graph.SerializeToString())
    else:
        path.write_bytes(content)
    with pytest.raises(error, match=match) as refused:
        client.OnnxTranslator(folder)
    assert str(path) in str(refused.value)


def test_the_folder_export_checks_itself_with_the_client(folder):
    """The exporter loads its new folder with the client before swapping it in."""
    onnx_export._check_translator_folder(folder)  # a servable folder passes
    (folder / "translator.json").write_text(_replace(length_multiple=0))
    with pytest.raises(ValueError, match="length_multiple"):
        onnx_export._check_translator_folder(folder)
