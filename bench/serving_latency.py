"""Latency of the exported translator SavedModel, exported on JAX and on TensorFlow.

    python bench/serving_latency.py                       # trains 12 min first
    python bench/serving_latency.py --run-dir runs/multi30k_quick

One trained model (a recipe run directory: `model.keras`, `tokenizer/`,
`config.json`; trained here with the recipe's `quick` shape for
`--train-minutes` if none is given) is exported four times, each by a
subprocess with its own `KERAS_BACKEND`:

- `jax` and `tensorflow`: the recipe's `export` subcommand (source lengths
  padded to 16/32/64/128/256 in the graph; on JAX the batch to a power of two);
- `jax_unbucketed` and `tensorflow_unbucketed`: `export_translator` with
  `source_length_buckets=None, batch_size_buckets=None` (one decoder
  function over any shape: the "before bucketing" baseline; its outputs are
  capped at `max_source_length + 50` tokens rather than bucket + 50, which
  only matters for sentences the model does not end by itself).

Each SavedModel is then measured in a fresh process that imports only
TensorFlow and tensorflow-text: per-request latency for batches of 1 and 32
Multi30k test sentences after a warm-up pass over the same requests
(medians), and the first-call cost of a new source length and of a new
batch size once the process is warm. Same weights everywhere, so the four
exports must also return the same translations (checked).

Results go to `<work-dir>/serving_latency.json` and a table on stdout.
"""

import argparse
import gzip
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "recipes" / "translate_multi30k.py"
TEST_SOURCES = ROOT / "recipes" / "data" / "multi30k" / "test_2016_flickr.en.gz"
EXPORTS = {
    "jax": ("jax", True),
    "tensorflow": ("tensorflow", True),
    "jax_unbucketed": ("jax", False),
    "tensorflow_unbucketed": ("tensorflow", False),
}


def _run(command, backend=None, **kwargs):
    env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3")
    if backend:
        env["KERAS_BACKEND"] = backend
    start = time.perf_counter()
    result = subprocess.run(command, env=env, capture_output=True, text=True, **kwargs)
    if result.returncode != 0:
        sys.exit(f"{' '.join(map(str, command))} failed:\n{result.stderr[-4000:]}")
    return result.stdout, time.perf_counter() - start


# === Steps run in subprocesses ===


def export_unbucketed(run_dir, directory):
    """`_export`: in a process whose KERAS_BACKEND is already set."""
    import keras

    from keras_attn.export import export_translator
    from keras_attn.text import SubwordTokenizer

    config = json.loads((run_dir / "config.json").read_text())
    export_translator(
        keras.saving.load_model(run_dir / "model.keras"),
        SubwordTokenizer.load(run_dir / "tokenizer"),
        directory,
        beam_size=config["beam_size"],
        length_penalty_alpha=config["length_penalty_alpha"],
        source_length_buckets=None,
        batch_size_buckets=None,
        verbose=False,
    )


def _timed(function, sentences):
    import tensorflow as tf

    start = time.perf_counter()
    outputs = function(sentences=tf.constant(sentences, tf.string))
    texts = [t.decode("utf-8") for t in outputs["translations"].numpy()]
    return time.perf_counter() - start, texts


def measure(directory, runs, batch_runs):
    """`_measure`: loads with TensorFlow + tensorflow-text only, times requests."""
    import tensorflow as tf
    import tensorflow_text  # noqa: F401 (registers the SentencePiece ops)

    assert "keras_attn" not in sys.modules
    with gzip.open(TEST_SOURCES, "rt", encoding="utf-8") as file:
        sentences = file.read().splitlines()
    start = time.perf_counter()
    loaded = tf.saved_model.load(str(directory))
    load_seconds = time.perf_counter() - start
    serve = loaded.signatures["serving_default"]
    lengths = loaded.signatures["tokenize"](sentences=tf.constant(sentences))
    lengths = lengths["lengths"].numpy().tolist()

    # Requests: `runs` single sentences of 11-16 ids (one bucket), and
    # `batch_runs` batches of 32 consecutive sentences; a warm-up pass, then
    # the timed one.
    singles = [[s] for s, n in zip(sentences, lengths) if 11 <= n <= 16][:runs]
    batches = [sentences[i * 32 : (i + 1) * 32] for i in range(batch_runs)]
    first_pass = {
        "batch_1": [_timed(serve, r)[0] for r in singles],
        "batch_32": [_timed(serve, r)[0] for r in batches],
    }
    second_pass = {
        "batch_1": [_timed(serve, r) for r in singles],
        "batch_32": [_timed(serve, r) for r in batches],
    }

    # New source lengths, warm process: one sentence per length 5..10 ids,
    # none of which was seen above (all in the 16 bucket).
    by_length = {}
    for sentence, n in zip(sentences, lengths):
        by_length.setdefault(n, sentence)
    new_length = [by_length[n] for n in range(5, 11) if n in by_length]
    new_length_first = [_timed(serve, [sentence])[0] for sentence in new_length]
    new_length_second = [_timed(serve, [sentence])[0] for sentence in new_length]
    # New batch sizes, warm process: after batches of 4 and 8 (the batch
    # buckets of a JAX export), 3, 5, 6 and 7 sentences of the 16 bucket.
    pool = [s for s, n in zip(sentences, lengths) if 11 <= n <= 16]
    for size in (4, 8):
        _timed(serve, pool[:size])
    new_batch = [_timed(serve, pool[:size])[0] for size in (3, 5, 6, 7)]
    again_batch = [_timed(serve, pool[:size])[0] for size in (3, 5, 6, 7)]

    def ms(values):
        return round(1000 * statistics.median(values), 1)

    return {
        "load_s": round(load_seconds, 2),
        "batch_1_ms": ms([t for t, _ in second_pass["batch_1"]]),
        "batch_32_ms": ms([t for t, _ in second_pass["batch_32"]]),
        "warmup_batch_1_max_ms": round(1000 * max(first_pass["batch_1"]), 1),
        "warmup_batch_32_max_ms": round(1000 * max(first_pass["batch_32"]), 1),
        "new_length_first_call_ms": ms(new_length_first),
        "new_length_second_call_ms": ms(new_length_second),
        "new_batch_size_first_call_ms": ms(new_batch),
        "new_batch_size_second_call_ms": ms(again_batch),
        "runs": [runs, batch_runs],
        "translations": [t for _, texts in second_pass["batch_1"] for t in texts],
        "mean_words": round(
            statistics.mean(
                len(t.split()) for _, texts in second_pass["batch_32"] for t in texts
            ),
            1,
        ),
    }


# === The driver ===


def train(run_dir, minutes):
    _run(
        [
            sys.executable,
            RECIPE,
            "train",
            "--output-dir",
            run_dir,
            "--setting",
            "quick",
            "--set",
            "epochs=1",
            "--set",
            f"time_budget_minutes={minutes}",
            "--set",
            "warmup_steps=100",
        ],
        backend="jax",
    )


def export_all(run_dir, work_dir):
    """Exports each variant once; a rerun reuses exports (delete to redo)."""
    seconds = {}
    for name, (backend, bucketed) in EXPORTS.items():
        directory = work_dir / name
        timing = work_dir / f"{name}.export_seconds"
        if not (directory / "saved_model.pb").exists() or not timing.exists():
            if bucketed:
                command = [sys.executable, RECIPE, "export", "--output-dir", run_dir]
                command += ["--output", directory]
            else:
                command = [sys.executable, __file__, "_export", run_dir, directory]
            _, elapsed = _run(command, backend=backend)
            timing.write_text(f"{elapsed:.1f}\n")
        seconds[name] = float(timing.read_text())
        print(f"exported {name} in {seconds[name]:.0f} s", flush=True)
    return seconds


def main(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--run-dir", type=Path, help="A trained recipe run.")
    parser.add_argument("--work-dir", type=Path, default=Path("runs/bench_serving"))
    parser.add_argument("--train-minutes", type=float, default=12.0)
    parser.add_argument("--runs", type=int, default=10, help="Batch-1 requests.")
    parser.add_argument("--batch-runs", type=int, default=3, help="Batch-32 requests.")
    args = parser.parse_args(argv)
    work_dir = args.work_dir.resolve()
    run_dir = (args.run_dir or work_dir / "run").resolve()
    if not (run_dir / "model.keras").exists():
        print(f"Training {run_dir} for {args.train_minutes} min ...", flush=True)
        train(run_dir, args.train_minutes)
    load_before = os.getloadavg()[0]
    export_seconds = export_all(run_dir, work_dir)
    results = {}
    for name in EXPORTS:
        stdout, _ = _run(
            [sys.executable, __file__, "_measure", work_dir / name]
            + [str(args.runs), str(args.batch_runs)]
        )
        results[name] = json.loads(stdout.strip().splitlines()[-1])
        results[name]["export_s"] = round(export_seconds[name], 1)
        print(name, {k: v for k, v in results[name].items() if k != "translations"})
    reference = results["jax"]["translations"]
    same = {name: r["translations"] == reference for name, r in results.items()}
    summary = {
        "results": results,
        "same_translations_as_jax": same,
        "load_average_1min": [round(load_before, 1), round(os.getloadavg()[0], 1)],
        "cpu_count": os.cpu_count(),
    }
    (work_dir / "serving_latency.json").write_text(json.dumps(summary, indent=2))
    print_table(results, same)
    print(f"1-min load average before/after: {summary['load_average_1min']}")


def print_table(results, same):
    columns = [
        ("export_s", "export s"),
        ("load_s", "load s"),
        ("batch_1_ms", "batch 1 ms"),
        ("batch_32_ms", "batch 32 ms"),
        ("new_length_first_call_ms", "new length, 1st call ms"),
        ("new_length_second_call_ms", "same, 2nd call ms"),
        ("new_batch_size_first_call_ms", "new batch size, 1st call ms"),
        ("new_batch_size_second_call_ms", "same, 2nd call ms"),
        ("mean_words", "words per translation"),
    ]
    print("| export | " + " | ".join(title for _, title in columns) + " | same text |")
    print("|---" * (len(columns) + 2) + "|")
    for name, result in results.items():
        cells = " | ".join(str(result[key]) for key, _ in columns)
        print(f"| {name} | {cells} | {same[name]} |")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "_export":
        sys.path.insert(0, str(ROOT))
        export_unbucketed(Path(sys.argv[2]), Path(sys.argv[3]))
    elif len(sys.argv) > 1 and sys.argv[1] == "_measure":
        print(json.dumps(measure(Path(sys.argv[2]), *map(int, sys.argv[3:5]))))
    else:
        main()
