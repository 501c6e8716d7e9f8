"""The console script serves trained presets: `translate`, `evaluate` and
`export` take `--preset NAME|DIR` in place of a run directory."""

import json
import os
import subprocess
import sys

import pytest
from untrained_runs import untrained_model_and_tokenizer

from keras_attn.text import Translator, load_multi30k
from keras_attn_recipes import translate_multi30k

# The console script's code (arguments, preset lookup, files) is the same on
# every backend; what it calls is tested per backend elsewhere (the shipped
# presets in tests/zoo, the exported translator in tests/export). Side by
# side it runs on torch, whose suite finishes first (there the export runs in
# a TensorFlow child process).
pytestmark = pytest.mark.split_backend("torch")

SENTENCES = ["A dog runs.", "Two men are talking in the street."]
# The tiny preset's beam, recorded in its metadata: the CLI must use it.
DECODING = {"beam_size": 2, "length_penalty_alpha": 0.6}

# Runs in a fresh interpreter: TensorFlow and tensorflow-text only.
SERVE = """
import json, sys
import tensorflow as tf
import tensorflow_text  # noqa: F401 (registers the SentencePiece ops)

request = json.loads(sys.stdin.read())
serve = tf.saved_model.load(request["directory"]).signatures["serving_default"]
out = serve(sentences=tf.constant(request["sentences"], tf.string))
print(json.dumps([t.decode("utf-8") for t in out["translations"].numpy()]))
"""


@pytest.fixture(scope="module")
def preset_dir(tmp_path_factory):
    """A preset written by `save_to_preset` from an untrained tiny model."""
    model, tokenizer = untrained_model_and_tokenizer()
    directory = tmp_path_factory.mktemp("presets") / "tiny_en_de"
    model.save_to_preset(
        directory, tokenizer=tokenizer, metadata={"decoding": DECODING}
    )
    return directory


def snapshot(directory):
    return {
        str(path.relative_to(directory)): path.read_bytes()
        for path in sorted(directory.rglob("*"))
        if path.is_file()
    }


def run_main(argv, capsys):
    translate_multi30k.main(argv)
    return capsys.readouterr().out


def test_translate_a_shipped_preset_by_name(capsys):
    out = run_main(["translate", "--preset", "multi30k_en_de", *SENTENCES], capsys)
    expected = Translator.from_preset("multi30k_en_de").translate(SENTENCES)
    assert out.splitlines() == expected
    assert out.startswith("Ein Hund")


def test_translate_a_preset_directory_by_path(
    preset_dir, tmp_path, monkeypatch, capsys
):
    # `./tiny_en_de` from its parent: a path, as the library's rule asks.
    monkeypatch.chdir(preset_dir.parent)
    before = snapshot(preset_dir)
    source = tmp_path / "in.txt"
    source.write_text("\n".join(SENTENCES) + "\n", encoding="utf-8")
    output = tmp_path / "out.txt"
    argv = ["translate", "--preset", "./tiny_en_de", "--input", str(source)]
    assert run_main([*argv, "--output", str(output)], capsys) == ""
    expected = Translator.from_preset(preset_dir).translate(SENTENCES)
    assert output.read_text(encoding="utf-8").splitlines() == expected
    greedy = run_main([*argv, "--strategy", "greedy"], capsys)
    reference = Translator.from_preset(preset_dir, strategy="greedy")
    assert greedy.splitlines() == reference.translate(SENTENCES)
    assert snapshot(preset_dir) == before  # only read


@pytest.mark.parametrize("command", ["translate", "evaluate", "export"])
def test_preset_and_output_dir_are_exclusive(command, capsys):
    extra = ["--output", "saved"] if command == "export" else []
    with pytest.raises(SystemExit) as info:
        translate_multi30k.parse_args(
            [command, "--preset", "multi30k_en_de", "--output-dir", "runs/x", *extra]
        )
    assert info.value.code == 2
    assert "argument --output-dir: not allowed with argument --preset" in (
        capsys.readouterr().err
    )
    # Neither: the default run directory, as before `--preset` existed.
    args = translate_multi30k.parse_args([command, *extra])
    assert (args.preset, args.output_dir) == (None, translate_multi30k.DEFAULT_RUN_DIR)


def test_an_unknown_preset_name_is_refused_naming_the_known_ones(
    preset_dir, monkeypatch
):
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(["translate", "--preset", "multi30k_en_fr", "A dog."])
    message = str(info.value.code)
    assert message.startswith("error: --preset: Unknown preset. Received: ")
    assert "multi30k_en_de (trained)" in message
    # A bare name is a shipped preset only, even where such a folder exists.
    monkeypatch.chdir(preset_dir.parent)
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(["translate", "--preset", "tiny_en_de", "A dog."])
    assert "pass its path, `'./tiny_en_de'`" in str(info.value.code)


def test_a_preset_of_another_model_is_refused():
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(["translate", "--preset", "digits_vit", "A dog."])
    assert str(info.value.code).startswith("error: --preset: The preset ")
    assert "not a keras_attn>Transformer" in str(info.value.code)


def test_evaluate_a_preset_prints_scores_and_writes_nothing(
    preset_dir, tmp_path, capsys
):
    data_dir = tmp_path / "data"
    data_dir.mkdir()
    sources, targets = load_multi30k("val")
    (data_dir / "test_2016_flickr.en").write_text("\n".join(sources[:3]) + "\n")
    (data_dir / "test_2016_flickr.de").write_text("\n".join(targets[:3]) + "\n")
    before = snapshot(preset_dir), snapshot(data_dir)
    out = run_main(
        [
            "evaluate",
            "--preset",
            str(preset_dir),
            "--data-dir",
            str(data_dir),
            "--strategy",
            "greedy",
        ],
        capsys,
    )
    assert "test_2016_flickr (3 sentences, greedy" in out
    assert "BLEU" in out
    assert (snapshot(preset_dir), snapshot(data_dir)) == before


def test_evaluate_a_preset_refuses_average_last(preset_dir):
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            ["evaluate", "--preset", str(preset_dir), "--average-last", "2"]
        )
    assert str(info.value.code).startswith(
        "error: --average-last averages a run directory's epoch checkpoints"
    )


def test_export_into_the_preset_is_refused(preset_dir):
    before = snapshot(preset_dir)
    with pytest.raises(SystemExit) as info:
        translate_multi30k.main(
            ["export", "--preset", str(preset_dir), "--output", str(preset_dir / "x")]
        )
    assert str(info.value.code).startswith(
        "error: --output must be a directory apart from the --preset directory"
    )
    assert snapshot(preset_dir) == before


@pytest.mark.slow
def test_export_a_preset_serves_its_translations(preset_dir, tmp_path, capsys):
    """`export --preset DIR`: the SavedModel decodes with the preset's beam.

    The tiny preset's export (three source buckets of a 2-layer d=32
    model): the export itself is the same code for any size
    (tests/export/test_translator_export.py), a shipped preset's name is
    resolved as `translate` resolves it (above).
    """
    directory = tmp_path / "translator"
    run_main(["export", "--preset", str(preset_dir), "--output", str(directory)], capsys)
    settings = json.loads(
        (directory / "assets.extra" / "translator_export.json").read_text()
    )
    assert {k: settings[k] for k in DECODING} == DECODING
    env = {
        key: value
        for key, value in os.environ.items()
        if key not in ("PYTHONPATH", "KERAS_BACKEND")
    }
    env["TF_CPP_MIN_LOG_LEVEL"] = "3"
    result = subprocess.run(
        [sys.executable, "-c", SERVE],
        input=json.dumps({"directory": str(directory), "sentences": SENTENCES}),
        capture_output=True,
        text=True,
        env=env,
        cwd=tmp_path,  # not the repository: keras_attn is not importable
        timeout=600,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    served = json.loads(result.stdout.strip().splitlines()[-1])
    # The untrained model never ends: the output's length limit is the
    # source's padded length + 50, so the reference pads as the export's
    # smallest bucket does (16; both sentences are shorter).
    expected = Translator.from_preset(preset_dir, length_multiple=16)
    assert served == expected.translate(SENTENCES)
