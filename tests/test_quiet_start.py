"""The command lines start quietly on a CPU; real errors still show.

The filter is tested on a stand-in `tensorflow` package that writes what
TensorFlow 2.21 writes on a machine without a GPU (fast, and independent of
the installed version), then end to end on the console script, a recipe and
`import keras_attn` in fresh processes on the current backend.
"""

import os
import subprocess
import sys
import textwrap
from pathlib import Path

import keras
import pytest
from fresh_library_import import run_library_import

ROOT = Path(__file__).resolve().parents[1]
BACKEND = keras.backend.backend()

# What a CPU machine printed before `quiet_start` (TensorFlow 2.21).
PREAMBLE = (
    "WARNING: All log messages before absl::InitializeLog() is called are "
    "written to STDERR"
)
ONEDNN = (
    "I0000 00:00:1795715070.829925    5286 port.cc:153] oneDNN custom "
    "operations are on. You may see slightly different numerical results."
)
NO_DRIVER = (
    "I0000 00:00:1795715070.830232    5286 cudart_stub.cc:31] Could not find "
    "cuda drivers on your machine, GPU will not be used."
)
CUINIT = (
    "E0000 00:00:1795715072.444601    5286 cuda_platform.cc:52] failed call to "
    "cuInit: INTERNAL: CUDA error: Failed call to cuInit: UNKNOWN ERROR (303)"
)
NOISE = ("cuInit", "cuda drivers", "oneDNN", "E0000", "absl")


def environment(**extra):
    """This process's environment without TensorFlow's logging settings."""
    env = {
        key: value
        for key, value in os.environ.items()
        if not key.startswith(("TF_CPP_", "TF_ENABLE_ONEDNN"))
    }
    env.update(extra)
    return env


FAKE_TENSORFLOW = textwrap.dedent(
    """
    import os
    import sys

    def say(text):
        os.write(2, text.encode() + b"\\n")  # As C++ code does, at the fd.

    if not os.environ.get("FAKE_DRIVER"):
        say({preamble!r})
        say({onednn!r})
        say({no_driver!r})
    say("W0000 00:00:1795715070.9    5286 fake.cc:1] a C++ warning")
    say("E0000 00:00:1795715070.9    5286 fake.cc:2] a C++ error")
    say("a line of plain C output")
    print("a Python line on sys.stderr", file=sys.stderr, flush=True)
    if os.environ.get("FAKE_FAIL") == "raise":
        raise ImportError("the stand-in tensorflow failed to load")
    if os.environ.get("FAKE_FAIL") == "abort":
        say("F0000 00:00:1795715070.9    5286 fake.cc:3] compiled to use AVX")
        os.abort()

    class config:
        queried = False

        @classmethod
        def list_physical_devices(cls):
            if not cls.queried:  # Devices are found once per process.
                cls.queried = True
                say({cuinit!r})
            return []
    """
).format(preamble=PREAMBLE, onednn=ONEDNN, no_driver=NO_DRIVER, cuinit=CUINIT)

PROGRAM = textwrap.dedent(
    """
    import os, sys
    from keras_attn_recipes.quiet_start import quiet_start, _QuietImport

    quiet_start()
    quiet_start()  # A second call adds nothing.
    assert sum(isinstance(f, _QuietImport) for f in sys.meta_path) <= 1
    # Asked whether it is installed first, as torch does on import.
    import importlib.util
    assert importlib.util.find_spec("tensorflow") is not None
    import tensorflow

    # TensorFlow's own loader, and no finder left behind.
    assert "exec_module" not in vars(tensorflow.__loader__)
    assert not any(isinstance(f, _QuietImport) for f in sys.meta_path)
    tensorflow.config.list_physical_devices()  # The program's first op.
    os.write(2, b"I0000 00:00:1795715090.1    5286 after.cc:1] after the import\\n")
    print("done", file=sys.stderr)
    """
)


def run_with_fake_tensorflow(tmp_path, **env):
    package = tmp_path / "tensorflow"
    package.mkdir(exist_ok=True)
    (package / "__init__.py").write_text(FAKE_TENSORFLOW)
    path = os.pathsep.join([str(tmp_path), str(ROOT)])
    return subprocess.run(
        [sys.executable, "-c", PROGRAM],
        capture_output=True,
        text=True,
        env=environment(**env, PYTHONPATH=path),
        timeout=60,
    )


def test_startup_notices_are_dropped_and_the_rest_kept_in_order(tmp_path):
    result = run_with_fake_tensorflow(tmp_path)
    assert result.returncode == 0, result.stderr
    assert result.stderr.splitlines() == [
        "E0000 00:00:1795715070.9    5286 fake.cc:2] a C++ error",
        "a line of plain C output",
        "a Python line on sys.stderr",
        # After the import nothing is filtered.
        "I0000 00:00:1795715090.1    5286 after.cc:1] after the import",
        "done",
    ]


def test_the_users_log_level_wins(tmp_path):
    everything = run_with_fake_tensorflow(tmp_path, TF_CPP_MIN_LOG_LEVEL="0")
    assert everything.returncode == 0, everything.stderr
    for line in (PREAMBLE, ONEDNN, NO_DRIVER, CUINIT, "a C++ warning"):
        assert line in everything.stderr
    warnings = run_with_fake_tensorflow(tmp_path, TF_CPP_MIN_LOG_LEVEL="1")
    assert "a C++ warning" in warnings.stderr
    assert "oneDNN" not in warnings.stderr and "cuInit" not in warnings.stderr


def test_the_cuinit_error_shows_where_a_driver_was_found(tmp_path):
    # Without "Could not find cuda drivers" the failed cuInit is news.
    result = run_with_fake_tensorflow(tmp_path, FAKE_DRIVER="1")
    assert result.returncode == 0, result.stderr
    assert CUINIT in result.stderr


def test_a_failing_import_shows_its_error(tmp_path):
    result = run_with_fake_tensorflow(tmp_path, FAKE_FAIL="raise")
    assert result.returncode == 1
    assert "ImportError: the stand-in tensorflow failed to load" in result.stderr
    assert "a C++ error" in result.stderr
    assert "oneDNN" not in result.stderr


def test_an_abort_during_the_import_still_shows_its_last_line(tmp_path):
    # The filter is a process of its own: it outlives the aborted program.
    result = run_with_fake_tensorflow(tmp_path, FAKE_FAIL="abort")
    assert result.returncode != 0
    assert "fake.cc:3] compiled to use AVX" in result.stderr
    assert "oneDNN" not in result.stderr


def assert_quiet(stderr):
    noisy = [line for line in stderr.splitlines() if any(n in line for n in NOISE)]
    assert not noisy, stderr


def test_the_console_script_starts_quietly_and_shows_a_real_error(tmp_path):
    # `translate` loads TensorFlow (tf.data, the tokenizer) on every backend,
    # then finds no trained model in the directory.
    script = Path(sys.executable).with_name("keras-attn-translate")
    command = [str(script)] if script.exists() else [sys.executable, "-m"]
    if not script.exists():
        command.append("keras_attn_recipes.translate_multi30k")
    missing = tmp_path / "no_run_here"
    result = subprocess.run(
        [*command, "translate", "--backend", BACKEND, "--output-dir", str(missing)]
        + ["A dog runs."],
        capture_output=True,
        text=True,
        env=environment(),
        timeout=300,
    )
    assert result.returncode != 0
    assert str(missing) in result.stderr  # The error, naming the directory.
    assert_quiet(result.stderr)


def test_the_recipes_help_is_quiet():
    for recipe in sorted((ROOT / "recipes").glob("*.py")):
        result = subprocess.run(
            [sys.executable, str(recipe), "--help"],
            capture_output=True,
            text=True,
            timeout=120,
        )
        assert result.returncode == 0, (recipe.name, result.stderr)
        assert result.stderr == "", (recipe.name, result.stderr)


def test_a_recipe_starts_quietly_and_shows_a_real_error(tmp_path):
    # On TensorFlow, choosing the backend imports TensorFlow; the missing
    # run directory is the error.
    missing = tmp_path / "no_run_here"
    result = subprocess.run(
        [sys.executable, str(ROOT / "recipes" / "save_zoo_preset.py"), "vit"]
        + ["--run-dir", str(missing), "--preset-dir", str(tmp_path / "preset")],
        capture_output=True,
        text=True,
        env=environment(KERAS_BACKEND=BACKEND),
        timeout=300,
    )
    assert result.returncode != 0
    assert str(missing) in result.stderr, result.stderr
    assert_quiet(result.stderr)


def test_importing_the_library_leaves_logging_alone():
    # The library neither sets TensorFlow's log level nor filters output;
    # on JAX and torch it does not import TensorFlow, so prints nothing.
    # (JAX itself sets TF_CPP_MIN_LOG_LEVEL=1 when unset, so Keras is
    # imported first and the library compared with it.) The fresh process
    # is shared with tests/test_package.py (`tests/fresh_library_import.py`).
    run = run_library_import()
    assert run.returncode == 0, run.stderr
    assert run.report["log_level_kept"], run.report
    assert run.report["meta_path_kept"], run.report
    if BACKEND == "tensorflow":
        # Keras imports TensorFlow here, which prints what it prints.
        assert run.report["loaded"]["tensorflow"] is True
    else:
        assert run.report["loaded"]["tensorflow"] is False
        assert_quiet(run.import_stderr)


@pytest.mark.parametrize(
    "backend, user_setting, seen",
    [
        ("jax", None, "0"),
        ("torch", None, "0"),
        ("tensorflow", None, "unset"),
        ("jax", "1", "1"),
    ],
)
def test_onednn_rewrites_are_off_where_tensorflow_only_feeds_the_model(
    tmp_path, backend, user_setting, seen
):
    # What TensorFlow reads when it loads: the oneDNN switch.
    package = tmp_path / "tensorflow"
    package.mkdir()
    (package / "__init__.py").write_text(
        "import os\nprint('seen', os.environ.get('TF_ENABLE_ONEDNN_OPTS', 'unset'))\n"
    )
    program = (
        "from keras_attn_recipes.quiet_start import quiet_start\n"
        "quiet_start()\n"
        "import tensorflow\n"
    )
    env = environment(
        KERAS_BACKEND=backend,
        PYTHONPATH=os.pathsep.join([str(tmp_path), str(ROOT)]),
    )
    if user_setting is not None:
        env["TF_ENABLE_ONEDNN_OPTS"] = user_setting
    result = subprocess.run(
        [sys.executable, "-c", program],
        capture_output=True,
        text=True,
        env=env,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.split() == ["seen", seen]
