"""Train, evaluate and use an English-to-German Transformer on Multi30k.

    python recipes/translate_multi30k.py all --setting quick
    python recipes/translate_multi30k.py train --setting full --output-dir runs/full
    python recipes/translate_multi30k.py train --setting quick --set train_steps=500
    python recipes/translate_multi30k.py evaluate --output-dir runs/full
    python recipes/translate_multi30k.py translate --output-dir runs/full "A dog runs."
    echo "Two men talk." | python recipes/translate_multi30k.py translate
    python recipes/translate_multi30k.py export --output-dir runs/full --output runs/full/saved_model
    python recipes/translate_multi30k.py translate --preset multi30k_en_de "A dog runs."
    python recipes/translate_multi30k.py evaluate --preset ./presets/my_preset
    python recipes/translate_multi30k.py export --preset multi30k_en_de --output saved_model
    python recipes/translate_multi30k.py save-preset --output-dir runs/full --preset-dir presets/multi30k_en_de --average-last 5 --dtype float16

Installed, the same command line is `keras-attn-translate ...`.

Every subcommand takes `--backend {jax,tensorflow,torch}`. Training writes into
`--output-dir`: the tokenizer, `model.keras`, a checkpoint per epoch, a
backup that a restarted `train` resumes from, TensorBoard logs, the history
and a learning-curve plot; one process at a time (a second `train` or
`evaluate` there is refused, naming the first one's pid), each file replaced
atomically, so a kill or a full disk leaves the old file. Settings are
data (`translation_config.py`); `--set key=value` overrides one (values
are JSON literals or strings, never code). Training length is counted in optimizer updates (`train_steps`; or
`epochs`), so a setting gives the same model on any machine. `--distribute {data,model}` and `--mesh` spread training over devices
(docs/distribution.md).

`translate`, `evaluate` and `export` read either a run directory
(`--output-dir`) or a trained preset (`--preset NAME|DIR`: a shipped
preset's name, or a preset directory given as a path, `./my_preset`),
not both (neither: `runs/multi30k`). A preset is only read: `evaluate --preset` prints
its scores and writes no file, and takes no lock.

An expected failure (a run not trained yet, a bad `--split`, an output
that cannot be written, a full disk) prints one `error: ...` line and
exits with status 1; usage errors exit with 2. An output that is a
symbolic link is written through to its target, and the link stays
(`keras_attn_recipes.cli_io`).
"""

import argparse
import json
import os
import sys
import time
from pathlib import Path

from keras_attn_recipes.cli_io import (
    EXPECTED_FAILURES,
    CommandLineError,
    InputError,
    PresetError,
    RunDirectoryError,
    check_export_apart_from_preset,
    check_output_dir,
    check_output_folder,
    check_output_is_not_input,
    check_output_writable,
    check_preset_dir_apart,
    check_split,
    check_trained_run,
    collect_sentences,
    failure_message,
    output_target,
    write_output,
)
from keras_attn_recipes.host_memory import reuse_freed_host_memory
from keras_attn_recipes.quiet_start import quiet_start
from keras_attn_recipes.run_lock import hold_run_directory, remove_partial_files
from keras_attn_recipes.translation_config import (
    SETTINGS,
    TranslationConfig,
    check_resumable,
)
from keras_attn_recipes.zoo_common import positive_int

EXAMPLE_SENTENCES = [
    "A man in a blue shirt is riding a bike.",
    "Two dogs are playing in the snow.",
    "A little girl is eating an ice cream.",
]
DEFAULT_RUN_DIR = Path("runs/multi30k")


def _parse_override(text):
    if "=" not in text:
        raise argparse.ArgumentTypeError(
            f"--set expects key=value. Received: --set {text!r}"
        )
    key, value = text.split("=", 1)
    try:
        value = json.loads(value)
    except json.JSONDecodeError:
        pass  # a plain string
    return key.strip(), value


def _select_backend(backend):
    """`--backend` (else `$KERAS_BACKEND`, else JAX), before Keras loads."""
    if backend:
        os.environ["KERAS_BACKEND"] = backend
    os.environ.setdefault("KERAS_BACKEND", "jax")
    os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")


def _parse_mesh(args, parser):
    """`--mesh` read by the library's `parse_mesh_shape`, as a usage error.

    `keras_attn` loads Keras, so the backend is chosen first (`main` would
    choose the same one next).
    """
    _select_backend(args.backend)
    from keras_attn.distribution import parse_mesh_shape

    try:
        return parse_mesh_shape(args.mesh)
    except ValueError as error:
        parser.error(f"argument --mesh: {error}")


def _add_common_arguments(sub, preset=False):
    """`--backend`, `--output-dir` and `--data-dir`; with `preset`, the run
    directory or `--preset`, not both (argparse says so; neither means the
    default run directory, as before `--preset` existed)."""
    sub.add_argument(
        "--backend",
        choices=("jax", "tensorflow", "torch"),
        default=None,
        help="Keras backend (default: $KERAS_BACKEND or jax).",
    )
    if preset:
        source = sub.add_mutually_exclusive_group()
        source.add_argument(
            "--output-dir",
            type=Path,
            default=None,
            help=f"The run directory (default: {DEFAULT_RUN_DIR}).",
        )
        source.add_argument(
            "--preset",
            default=None,
            metavar="NAME|DIR",
            help="A trained preset in place of a run directory: a shipped "
            "name (multi30k_en_de) or a preset directory given as a path "
            "(./my_preset). Its decoding settings are the preset's.",
        )
    else:
        sub.add_argument("--output-dir", type=Path, default=DEFAULT_RUN_DIR)
    sub.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        help="Directory of {split}.{en,de}[.gz] files "
        "(default: the vendored Multi30k).",
    )


def _add_training_arguments(sub):
    sub.add_argument("--setting", choices=sorted(SETTINGS), default="quick")
    sub.add_argument(
        "--set",
        dest="overrides",
        type=_parse_override,
        action="append",
        default=[],
        metavar="KEY=VALUE",
    )
    sub.add_argument(
        "--distribute",
        choices=("none", "data", "model"),
        default="none",
        help="Spread training over the devices: data parallel, or (JAX "
        "only) Megatron-style model parallel too. See docs/distribution.md.",
    )
    sub.add_argument(
        "--mesh",
        default=None,
        metavar="BATCH[,MODEL]",
        help='Device mesh, e.g. "2,4": 2-way data x 4-way model parallel '
        "(default: every device on the batch axis for data, on the model "
        "axis for model).",
    )


def _add_evaluation_arguments(sub):
    sub.add_argument("--split", default="test_2016_flickr")
    sub.add_argument("--strategy", choices=("beam", "greedy"), default="beam")
    sub.add_argument(
        "--average-last",
        type=positive_int,
        default=None,
        metavar="N",
        help="Evaluate the mean weights of the last N epoch checkpoints "
        "(the paper averages the last 5 or 20). Default: the setting's "
        "`average_checkpoints` (1 is the final model).",
    )


def _add_translate_command(commands):
    translate = commands.add_parser("translate", help="Translate sentences.")
    _add_common_arguments(translate, preset=True)
    translate.add_argument("sentences", nargs="*")
    translate.add_argument("--input", type=Path, help="One sentence per line.")
    translate.add_argument("--output", type=Path, help="Write here, not stdout.")
    translate.add_argument("--strategy", choices=("beam", "greedy"), default="beam")


def _add_export_command(commands):
    export = commands.add_parser(
        "export", help="Write a SavedModel that translates raw strings."
    )
    _add_common_arguments(export, preset=True)
    export.add_argument("--output", type=Path, required=True, help="SavedModel dir.")
    export.add_argument("--strategy", choices=("beam", "greedy"), default="beam")


def _add_save_preset_command(commands):
    preset = commands.add_parser(
        "save-preset",
        help="Write the trained run as a preset (keras_attn.text.Translator."
        "from_preset loads it).",
    )
    _add_common_arguments(preset)
    preset.add_argument(
        "--preset-dir", type=Path, required=True, help="The preset directory."
    )
    preset.add_argument(
        "--average-last",
        type=positive_int,
        default=None,
        metavar="N",
        help="Save the mean weights of the last N epoch checkpoints. Default: "
        "the setting's `average_checkpoints`.",
    )
    preset.add_argument(
        "--dtype",
        choices=("float32", "float16"),
        default="float32",
        help="Weights stored in float16 take half the space and load as "
        "float32 (default: float32).",
    )
    preset.add_argument(
        "--description", default=None, help="One line for list_presets()."
    )


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    commands = parser.add_subparsers(dest="command", required=True)
    train = commands.add_parser("train", help="Train (resumes if restarted).")
    _add_common_arguments(train)
    _add_training_arguments(train)
    evaluate = commands.add_parser(
        "evaluate",
        help="BLEU and chrF on a split (with --preset: printed, no file written).",
    )
    _add_common_arguments(evaluate, preset=True)
    _add_evaluation_arguments(evaluate)
    _add_translate_command(commands)
    _add_export_command(commands)
    _add_save_preset_command(commands)
    everything = commands.add_parser("all", help="train, evaluate, translate.")
    _add_common_arguments(everything)
    _add_training_arguments(everything)
    _add_evaluation_arguments(everything)
    args = parser.parse_args(argv)
    if args.output_dir is None and getattr(args, "preset", None) is None:
        args.output_dir = DEFAULT_RUN_DIR
    if getattr(args, "mesh", None) is not None:
        args.mesh = _parse_mesh(args, parser)
    return args


def _check_before_work(args):
    """Everything that can be refused before a model loads: `(config, sentences)`.

    Raises a `CommandLineError` naming the flag (`main` prints it).
    """
    distribute = getattr(args, "distribute", "none")
    if distribute != "none" and os.environ["KERAS_BACKEND"] == "torch":
        # Refused before any work (keras_attn.distribution.configure says the
        # same): Keras has no `keras.distribution` on torch.
        raise InputError(
            f"--distribute {distribute} needs KERAS_BACKEND=jax or "
            "tensorflow: Keras implements keras.distribution for JAX only (and "
            "keras-attn uses tf.distribute on TensorFlow); on torch, train on "
            "one device (--distribute none). See docs/distribution.md."
        )
    config = sentences = None
    if getattr(args, "preset", None) is not None:
        _check_preset(args)
    else:
        check_output_dir(args.output_dir)
    if args.command == "save-preset":
        check_preset_dir_apart(args.preset_dir, args.output_dir)
        check_output_folder(args.preset_dir, "--preset-dir")
    if args.command in ("train", "all"):
        try:
            config = SETTINGS[args.setting].replace(**dict(args.overrides))
        except (TypeError, ValueError) as error:
            raise InputError(f"--set: {error}") from None
        try:
            check_resumable(config, args.output_dir)
        except ValueError as error:
            raise RunDirectoryError(str(error)) from None
    if args.command in ("evaluate", "all"):
        validation = ["val"] if args.command == "all" and args.split != "val" else []
        for split in validation + [args.split]:
            check_split(args.data_dir, split)
    if args.command == "export":
        check_output_folder(args.output)
    if args.command == "translate":
        # Inputs and the output are checked before the model loads.
        sentences = collect_sentences(
            args.sentences, args.input, sys.stdin is None or sys.stdin.isatty()
        )
        if args.output:
            check_output_is_not_input(args.output, args.input)
            check_output_writable(args.output)
    if config is None and args.output_dir is not None:
        # `evaluate`, `translate`, `export`, `save-preset` of a run: last,
        # after the flags, whose errors say more.
        check_trained_run(
            args.output_dir, args.command, getattr(args, "average_last", None)
        )
    return config, sentences


def _check_preset(args):
    """Refuses a `--preset` that names no preset (the library's rule: a bare
    name is a shipped preset only, a directory is given as a path) and the
    flags a preset cannot take, before the model loads."""
    from keras_attn.models.preset_io import preset_directory

    if getattr(args, "average_last", None) is not None:
        raise PresetError(
            "--average-last averages a run directory's epoch checkpoints; a "
            "preset holds one set of weights. Received: --preset "
            f"{args.preset!r}, --average-last {args.average_last}"
        )
    try:
        directory = preset_directory(args.preset)
    except (ValueError, FileNotFoundError) as error:
        raise PresetError(f"--preset: {error}") from None
    if args.command == "export":
        check_export_apart_from_preset(args.output, directory)
    return directory


def _use_preset(args, sentences):
    """`translate`, `evaluate` and `export` of a preset; it is only read, so
    no lock is taken."""
    from keras_attn_recipes import translation_steps as steps

    if args.command == "evaluate":
        steps.evaluate_preset(args.preset, args.data_dir, args.split, args.strategy)
    elif args.command == "export":
        steps.export_preset(
            args.preset, output_target(args.output, "--output"), args.strategy
        )
    else:
        _print_translations(
            args, steps.translate_preset(args.preset, sentences, args.strategy)
        )


def _print_translations(args, translations):
    """One line per translation, to `--output` or standard output."""
    text = "".join(line + "\n" for line in translations)
    if args.output:
        write_output(args.output, text)
    else:
        sys.stdout.write(text)


def _train_and_evaluate(args, config):
    """`train`, `evaluate` and `all`."""
    # Imported here so that --backend takes effect before Keras loads.
    from keras_attn_recipes import translation_steps as steps

    if config is not None:
        try:
            steps.train(
                config, args.output_dir, args.data_dir, args.distribute, args.mesh
            )
        except steps.TrainingDiverged as error:
            raise CommandLineError(str(error)) from None
    if args.command in ("evaluate", "all"):
        steps.evaluate(
            args.output_dir,
            args.data_dir,
            args.split,
            args.strategy,
            args.average_last,
            validation=args.command == "all",
        )
    if args.command == "all":
        steps.print_translations(args.output_dir, EXAMPLE_SENTENCES, "beam")


def _use_trained_run(args, sentences, argv):
    """`export`, `save-preset` and `translate`."""
    from keras_attn_recipes import translation_steps as steps

    if args.command == "export":
        steps.export(
            args.output_dir, output_target(args.output, "--output"), args.strategy
        )
    if args.command == "save-preset":
        from keras_attn_recipes.translation_preset import save_preset

        save_preset(
            args.output_dir,
            output_target(args.preset_dir, "--preset-dir"),
            average_last=args.average_last,
            dtype=None if args.dtype == "float32" else args.dtype,
            description=args.description,
            command=" ".join(["keras-attn-translate", *(argv or sys.argv[1:])]),
        )
    if args.command == "translate":
        _print_translations(
            args, steps.translate(args.output_dir, sentences, args.strategy)
        )


def main(argv=None):
    quiet_start()  # Before TensorFlow loads: no CUDA notices on a CPU.
    args = parse_args(argv)
    _select_backend(args.backend)
    if argv is None:  # A command-line run (tests call main with arguments).
        # Restarts this script (JAX only) with malloc options that let its
        # per-step CPU buffers reuse memory instead of page-faulting.
        reuse_freed_host_memory()
    try:
        _run(args, argv)
    except EXPECTED_FAILURES as error:
        # The one place that turns an expected failure into `error: ...`
        # and exit status 1; anything else is a bug and keeps its traceback.
        sys.exit(f"error: {failure_message(error)}")


def _run(args, argv):
    config, sentences = _check_before_work(args)
    if getattr(args, "preset", None) is not None:
        _use_preset(args, sentences)
    elif args.command in ("train", "evaluate", "all"):
        with _run_directory_lock(args):
            if config is not None:  # `train`, `all`: ours to tidy
                remove_partial_files(args.output_dir)
            _train_and_evaluate(args, config)
    else:
        _use_trained_run(args, sentences, argv)


def _run_directory_lock(args):
    """The run directory's lock, held by the commands that write into it.

    `train` and `all` write everything there, `evaluate` its translations,
    scores and plot; a second such command on one `--output-dir` is refused
    while the first runs. `translate`, `export` and `save-preset` only read
    the run (its writers replace each file atomically) and take no lock.
    """
    check_output_dir(args.output_dir, create=True)
    return hold_run_directory(args.output_dir, args.command)


if __name__ == "__main__":
    start = time.time()
    main()
    print(f"Done in {time.time() - start:.0f} s.", file=sys.stderr)


__all__ = ["TranslationConfig", "main", "parse_args"]
