"""Runs the peers' own unit tests with keras-attn's classes in place of theirs.

The contract of issue #23: a Keras or keras-hub user swaps an import and keeps
their code. This script runs, unchanged, the test files of

* Keras's `keras.layers.MultiHeadAttention` and `GroupedQueryAttention`
  (`keras/src/layers/attention/multi_head_attention_test.py`,
  `grouped_query_attention_test.py`),
* keras-hub's `TransformerEncoder` and `TransformerDecoder`
  (`keras_hub/src/layers/modeling/transformer_encoder_test.py`,
  `transformer_decoder_test.py`),
* Keras's `keras.layers.RMSNormalization`
  (`keras/src/layers/normalization/rms_normalization_test.py`),
* keras-hub's `RotaryEmbedding` and `AlibiBias`
  (`keras_hub/src/layers/modeling/rotary_embedding_test.py`,
  `alibi_bias_test.py`),

found in a directory you give (it fetches nothing: copy the files from the
peers' repositories at the versions installed, Keras 3.15.1 and keras-hub
0.32.0; never commit them here). Before pytest imports them, the peers'
classes are replaced by `keras_attn.layers.MultiHeadAttention`,
`GroupedQueryAttention`, `TransformerEncoderBlock`, `TransformerDecoderBlock`, `RMSNormalization`,
`RotaryEmbedding` and `AlibiBias`; `--peer` runs them
against the peers' own classes instead (the "before" column).

Usage (one backend per run):

    KERAS_BACKEND=jax PYTHONPATH=$PWD .venv/bin/python \\
        scripts/run_peer_tests.py /path/to/peer_tests [--peer] [pytest args]

Prints one line per test file (passed / failed / skipped) and every failure
with the last line of its error.
"""

import argparse
import collections
import os
import shutil
import sys
import tempfile
import types

# file name -> (module holding the peer's class, class name, our class name)
SUBSTITUTIONS = {
    "multi_head_attention_test.py": (
        "keras.src.layers",
        "MultiHeadAttention",
        "MultiHeadAttention",
    ),
    "grouped_query_attention_test.py": (
        "keras.src.layers",
        "GroupedQueryAttention",
        "GroupedQueryAttention",
    ),
    "transformer_encoder_test.py": (
        "keras_hub.src.layers.modeling.transformer_encoder",
        "TransformerEncoder",
        "TransformerEncoderBlock",
    ),
    "transformer_decoder_test.py": (
        "keras_hub.src.layers.modeling.transformer_decoder",
        "TransformerDecoder",
        "TransformerDecoderBlock",
    ),
    "rms_normalization_test.py": (
        "keras.src.layers",
        "RMSNormalization",
        "RMSNormalization",
    ),
    "rotary_embedding_test.py": (
        "keras_hub.src.layers.modeling.rotary_embedding",
        "RotaryEmbedding",
        "RotaryEmbedding",
    ),
    "alibi_bias_test.py": (
        "keras_hub.src.layers.modeling.alibi_bias",
        "AlibiBias",
        "AlibiBias",
    ),
}


def substitute():
    """Puts keras-attn's classes where the peer test files import theirs."""
    import importlib

    import keras

    import keras_attn

    for module_name, peer_name, our_name in SUBSTITUTIONS.values():
        module = importlib.import_module(module_name)
        setattr(module, peer_name, getattr(keras_attn.layers, our_name))
    keras.layers.MultiHeadAttention = keras_attn.layers.MultiHeadAttention
    keras.layers.GroupQueryAttention = keras_attn.layers.GroupedQueryAttention


class Tally:
    """A pytest plugin counting outcomes per file and keeping failures."""

    def __init__(self):
        self.counts = collections.defaultdict(collections.Counter)
        self.failures = []

    def pytest_runtest_logreport(self, report):
        file_name = os.path.basename(report.nodeid.split("::")[0])
        if report.when == "call" or (report.when == "setup" and not report.passed):
            outcome = report.outcome
            self.counts[file_name][outcome] += 1
            if report.failed:
                message = str(report.longrepr).strip().splitlines()
                reason = next(
                    (line for line in reversed(message) if line.startswith("E ")),
                    message[-1] if message else "",
                )
                self.failures.append((report.nodeid, reason.strip()))


def _peer_files(peer_dir):
    """The peer test files of `peer_dir`, under their plain names.

    Files named with a version prefix (`keras_3.15.1_<name>`, not an
    importable module name) are copied under `<name>` into a temporary
    directory first.
    """
    found = {}
    for file_name in sorted(os.listdir(peer_dir)):
        name = next((n for n in SUBSTITUTIONS if file_name.endswith(n)), None)
        if name is not None:
            found[name] = os.path.join(peer_dir, file_name)
    if all(os.path.basename(path) == name for name, path in found.items()):
        return list(found.values())
    copies = tempfile.mkdtemp(prefix="peer_tests_")
    for name, path in found.items():
        shutil.copyfile(path, os.path.join(copies, name))
    return [os.path.join(copies, name) for name in found]


def main():
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("peer_dir", help="directory holding the peer test files")
    parser.add_argument(
        "--peer",
        action="store_true",
        help="run against the peers' own classes (no substitution)",
    )
    args, pytest_args = parser.parse_known_args()
    os.environ.setdefault("KERAS_BACKEND", "jax")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")
    files = _peer_files(args.peer_dir)
    if not files:
        sys.exit(
            f"No peer test file in {args.peer_dir}: expected {list(SUBSTITUTIONS)}"
        )
    try:
        import grain  # noqa: F401
    except ImportError:
        # keras-hub's `TestCase` imports grain for its preprocessing checks,
        # which the layer tests run here never reach.
        sys.modules["grain"] = types.ModuleType("grain")
    import pytest

    if not args.peer:
        substitute()
    tally = Tally()
    import keras

    pytest.main(
        [
            "-q",
            "-p",
            "no:cacheprovider",
            f"--rootdir={os.path.dirname(files[0]) if files else args.peer_dir}",
            "-c",
            os.devnull,
            *pytest_args,
            *files,
        ],
        plugins=[tally],
    )
    which = "peer's classes" if args.peer else "keras-attn's classes"
    print(f"\n== {which}, KERAS_BACKEND={keras.backend.backend()} ==")
    for name in SUBSTITUTIONS:
        counts = tally.counts.get(name)
        if counts is not None:
            print(
                f"{name}: {counts['passed']} passed, {counts['failed']} failed, "
                f"{counts['skipped']} skipped"
            )
    for nodeid, reason in tally.failures:
        print(f"FAILED {nodeid}: {reason}")


if __name__ == "__main__":
    main()
