"""Outputs that are symbolic links (issue 49: robustness round 4).

The rule (`keras_attn_recipes.cli_io`): an output named on the command line
is written through a symbolic link to the link's final target, as a shell's
`>` does; the target is created or replaced and the link stays. Before,
`translate --output` on a dangling link replaced the link with a regular
file and left an empty stray file at its target.
"""

import os
from pathlib import Path

import pytest

from keras_attn_recipes import translate_multi30k, translation_steps

# Backend-independent code: one backend runs it when they run side by side.
pytestmark = pytest.mark.split_backend("torch")

TRANSLATIONS = ["Ein Hund rennt.", "Zwei Männer reden."]


def entries(directory):
    """Every entry below `directory`: a link's target text, a file's bytes."""
    found = {}
    for path in sorted(directory.rglob("*")):
        name = str(path.relative_to(directory))
        if path.is_symlink():
            found[name] = ("link", os.readlink(path))
        elif path.is_file():
            found[name] = ("file", path.read_bytes())
        else:
            found[name] = ("folder", None)
    return found


@pytest.fixture
def trained(tmp_path, monkeypatch):
    """A run that passes the checks before loading, and stand-ins for the
    steps that would load its model (the writes are what is checked)."""
    run = tmp_path / "run"
    (run / "checkpoints").mkdir(parents=True)
    (run / "model.keras").write_bytes(b"stand-in")
    calls = {}
    monkeypatch.setattr(
        translation_steps, "translate", lambda run, sentences, strategy: TRANSLATIONS
    )
    monkeypatch.setattr(
        translation_steps,
        "export",
        lambda run, output, strategy: calls.setdefault("export", output),
    )
    return run, calls


def translate(run, output):
    argv = ["translate", "--output-dir", str(run), "A dog runs.", "Two men talk."]
    translate_multi30k.main([*argv, "--output", str(output)])


def error_of(call, *args):
    with pytest.raises(SystemExit) as info:
        call(*args)
    return str(info.value.code)


@pytest.mark.parametrize("existing", [False, True], ids=["dangling", "to_a_file"])
def test_translate_writes_through_a_link_and_keeps_it(tmp_path, trained, existing):
    run, _ = trained
    out = tmp_path / "out"
    out.mkdir()
    target = out / "target.txt"
    if existing:
        target.write_text("the last translation\n")
    (out / "link.txt").symlink_to("target.txt")  # relative, as `ln -s` makes
    translate(run, out / "link.txt")
    assert entries(out) == {
        "link.txt": ("link", "target.txt"),
        "target.txt": ("file", "".join(t + "\n" for t in TRANSLATIONS).encode()),
    }


def test_a_refused_translate_leaves_a_dangling_link_as_it_was(tmp_path):
    # The report: the check created the target, then removed the link.
    out = tmp_path / "out"
    out.mkdir()
    (out / "link.txt").symlink_to(out / "target.txt")
    before = entries(out)
    message = error_of(translate, tmp_path / "untrained", out / "link.txt")
    assert message.startswith("error: --output-dir")
    assert entries(out) == before


@pytest.mark.parametrize("kind", ["loop", "missing_folder"])
def test_a_link_that_cannot_be_written_through_is_refused(tmp_path, trained, kind):
    run, _ = trained
    out = tmp_path / "out"
    out.mkdir()
    link = out / "link.txt"
    if kind == "loop":
        (out / "other.txt").symlink_to(link)
        link.symlink_to(out / "other.txt")
        expected = "error: --output is a symbolic link that loops"
    else:
        link.symlink_to(tmp_path / "absent" / "target.txt")
        expected = "error: --output cannot be written: No such file or directory"
    before = entries(tmp_path)
    message = error_of(translate, run, link)
    assert message.startswith(expected) and f"--output {str(link)!r}" in message
    assert entries(tmp_path) == before


def test_export_follows_the_same_rule(tmp_path, trained):
    run, calls = trained
    link = tmp_path / "saved_model"
    link.symlink_to(tmp_path / "exports" / "en_de")
    (tmp_path / "exports").mkdir()
    translate_multi30k.main(["export", "--output-dir", str(run), "--output", str(link)])
    # The SavedModel is written at the link's target; the link stays.
    real = Path(os.path.realpath(tmp_path))
    assert calls["export"] == real / "exports" / "en_de"
    assert os.readlink(link) == str(tmp_path / "exports" / "en_de")
    # A link to a file is a file: refused, the file unchanged.
    (tmp_path / "notes.txt").write_text("keep me\n")
    to_file = tmp_path / "to_notes"
    to_file.symlink_to(tmp_path / "notes.txt")
    argv = ["export", "--output-dir", str(run), "--output", str(to_file)]
    assert error_of(translate_multi30k.main, argv).startswith(
        "error: --output must be a folder path"
    )
    assert (tmp_path / "notes.txt").read_text() == "keep me\n"


def test_save_preset_follows_the_same_rule(tmp_path, trained, monkeypatch):
    from keras_attn_recipes import translation_preset

    run, _ = trained
    saved = {}
    monkeypatch.setattr(
        translation_preset,
        "save_preset",
        lambda run, preset_dir, **options: saved.setdefault("to", preset_dir),
    )
    (tmp_path / "presets").mkdir()
    link = tmp_path / "my_preset"
    link.symlink_to(tmp_path / "presets" / "en_de")
    argv = ["save-preset", "--output-dir", str(run), "--preset-dir", str(link)]
    translate_multi30k.main(argv)
    assert saved["to"] == Path(os.path.realpath(tmp_path)) / "presets" / "en_de"
    assert link.is_symlink()
