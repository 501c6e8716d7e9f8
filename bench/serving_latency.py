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

`--formats` compares serving runtimes instead (`formats_main`) on a shipped
preset (default `multi30k_en_de`), with the same Multi30k test sentences
(`load_multi30k("test_2016_flickr")`'s first 40 one at a time, the next
192 in batches of 32) and the same decoding (greedy, then beam with the
preset's beam size and length penalty): the Keras
`keras_attn.text.Translator` in memory (JAX, TensorFlow), the SavedModel
of `export_translator` (exported on JAX and on TensorFlow, served by
TensorFlow + tensorflow-text) and ONNX Runtime (`export_onnx_translator`
and its client, with numpy, onnxruntime and sentencepiece only). Each runs
in its own long-lived process; after a warm-up pass over all requests, each
request goes to every process in turn, the order rotated, so that load
from other jobs hits all alike. Medians; the translations must agree.
Results go to `<work-dir>/serving_formats_<strategies>.json`.

    python bench/serving_latency.py --formats                  # greedy and beam, ~8 min
    python bench/serving_latency.py --formats --strategies greedy
    python bench/serving_latency.py --formats --smoke          # random tiny preset, ~1 min

`--ctranslate2` puts CTranslate2 beside the Keras `Translator` on a Marian
checkpoint (`--preset hf://Helsinki-NLP/opus-mt-en-de` or a local
checkpoint directory): the `ctranslate2` row is the checkpoint loaded by
keras-attn, written back by `keras_attn.hf.export_to_transformers`,
converted by CTranslate2's `TransformersConverter` and served by
`ctranslate2.Translator` (tokenized by `transformers.MarianTokenizer`, as
CTranslate2's documentation does). Greedy search is the same search on
both sides; CTranslate2's beam search normalizes scores by length
(`length_penalty`), ours with GNMT's penalty, so beam translations may
differ. The SavedModel and ONNX rows are left out (a Marian tokenizer runs
in Python, not in a TensorFlow graph).

    python bench/serving_latency.py --formats --ctranslate2 --preset hf://Helsinki-NLP/opus-mt-en-de
    python bench/serving_latency.py --formats --ctranslate2 --smoke   # random tiny Marian, ~1 min
"""

import argparse
import gzip
import hashlib
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))  # keras_attn_recipes, and keras_attn uninstalled
RECIPE = ROOT / "recipes" / "translate_multi30k.py"
# What `keras_attn.text.load_multi30k("test_2016_flickr")` reads (sources).
TEST_SOURCES = ROOT / "keras_attn/text/data/multi30k/test_2016_flickr.en.gz"
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
    argv = sys.argv[1:] if argv is None else argv
    if "--formats" in argv:
        return formats_main(argv)
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


# === --formats: Keras in memory, SavedModel and ONNX Runtime ===

# Row name -> (runtime, the backend that runs or exports it).
FORMAT_ROWS = {
    "keras_jax": ("keras", "jax"),
    "keras_tensorflow": ("keras", "tensorflow"),
    "savedmodel_jax": ("savedmodel", "jax"),
    "savedmodel_tensorflow": ("savedmodel", "tensorflow"),
    "onnxruntime": ("onnx", "tensorflow"),
    "ctranslate2": ("ctranslate2", "tensorflow"),
}
ROW_TITLES = {
    "keras_jax": "Keras `Translator`, JAX",
    "keras_tensorflow": "Keras `Translator`, TensorFlow",
    "savedmodel_jax": "SavedModel (JAX export), TensorFlow runtime",
    "savedmodel_tensorflow": "SavedModel (TensorFlow export), TensorFlow runtime",
    "onnxruntime": "ONNX Runtime (TensorFlow export)",
    "ctranslate2": "CTranslate2 (Marian export)",
}
# Sources are padded to a multiple of 16 in the Keras and ONNX rows: the
# SavedModel's smallest bucket, so that all decode the same arrays (up to
# 32 pieces; beyond, the SavedModel pads to 64 and the others to 48).
LENGTH_MULTIPLE = 16
PROTOCOL = "@@ "  # Prefix of the workers' answers on stdout.
FRAMEWORKS = ("keras", "tensorflow", "jax", "torch")


def preset_directory(preset):
    """A shipped preset's directory (`keras_attn/presets/NAME`) or a path."""
    shipped = ROOT / "keras_attn" / "presets" / preset
    return shipped if shipped.is_dir() else Path(preset).resolve()


def is_marian(preset):
    """Whether the preset is a Marian checkpoint (for `--ctranslate2`)."""
    config = preset_directory(preset) / "config.json"
    return (
        config.is_file()
        and json.loads(config.read_text()).get("model_type") == "marian"
    )


def decoding_options(preset, strategy):
    """`{"beam_size", "length_penalty_alpha"}` of the preset's beam search."""
    if strategy != "beam":
        return {}
    metadata_file = preset_directory(preset) / "metadata.json"
    # (A Marian checkpoint has none: our defaults.)
    metadata = json.loads(metadata_file.read_text()) if metadata_file.is_file() else {}
    saved = metadata.get("decoding", {})
    return {
        "beam_size": saved.get("beam_size", 4),
        "length_penalty_alpha": saved.get("length_penalty_alpha", 0.6),
    }


def make_smoke_preset(directory):
    """`--smoke`'s preset: a random one-layer `transformer_tiny`, a 120-piece
    tokenizer. One layer: the exports trace every layer into each graph, and
    the smoke checks that each runtime serves, not how deep a model."""
    import keras

    from keras_attn.models import Transformer
    from keras_attn.text import SubwordTokenizer

    keras.utils.set_random_seed(3)
    with gzip.open(TEST_SOURCES, "rt", encoding="utf-8") as file:
        sentences = file.read().splitlines()[:200]
    tokenizer = SubwordTokenizer.train(sentences, vocabulary_size=120)
    model = Transformer.from_preset(
        "transformer_tiny", vocabulary_size=tokenizer.vocabulary_size, num_layers=1
    )
    model.save_to_preset(directory, tokenizer=tokenizer)


def make_smoke_marian(directory):
    """`--ctranslate2 --smoke`'s checkpoint: a random tiny `MarianMTModel`
    (OPUS-MT's options) and a 120-piece SentencePiece model as both
    `source.spm` and `target.spm`, saved with `save_pretrained`."""
    import sentencepiece
    import torch
    import transformers

    with gzip.open(TEST_SOURCES, "rt", encoding="utf-8") as file:
        sentences = file.read().splitlines()[:200]
    directory.mkdir(parents=True)
    spm = directory / "spm"
    sentencepiece.SentencePieceTrainer.train(
        sentence_iterator=iter(sentences),
        model_prefix=str(spm),
        vocab_size=120,
        unk_id=0,
        eos_id=1,
        bos_id=-1,
        pad_id=-1,
        minloglevel=2,
    )
    processor = sentencepiece.SentencePieceProcessor(model_file=f"{spm}.model")
    vocabulary = {"</s>": 0, "<unk>": 1}
    for i in range(processor.get_piece_size()):
        vocabulary.setdefault(processor.id_to_piece(i), len(vocabulary))
    vocabulary["<pad>"] = len(vocabulary)
    (directory / "vocab.json").write_text(json.dumps(vocabulary, ensure_ascii=False))
    torch.manual_seed(3)
    size = len(vocabulary)
    config = transformers.MarianConfig(
        vocab_size=size,
        d_model=32,
        encoder_layers=2,
        decoder_layers=2,
        encoder_attention_heads=2,
        decoder_attention_heads=2,
        encoder_ffn_dim=64,
        decoder_ffn_dim=64,
        max_position_embeddings=256,
        activation_function="swish",
        scale_embedding=True,
        pad_token_id=size - 1,
        decoder_start_token_id=size - 1,
        eos_token_id=0,
        forced_eos_token_id=0,
    )
    model = transformers.MarianMTModel(config)
    with torch.no_grad():
        # Large random weights: translations of varied length and tokens
        # (at the default initialization every sentence ends at once).
        for name, parameter in model.named_parameters():
            if parameter.ndim == 2 and "embed_positions" not in name:
                parameter.normal_(0.0, 0.4)
        model.model.shared.weight[size - 1] = 0.0  # OPUS-MT's zero <pad> row
    model.save_pretrained(directory, safe_serialization=True)
    transformers.MarianTokenizer(
        f"{spm}.model", f"{spm}.model", str(directory / "vocab.json")
    ).save_pretrained(directory)


def export_ctranslate2(directory, work_dir):
    """A Marian checkpoint loaded by keras-attn, exported back and converted."""
    import ctranslate2

    from keras_attn.hf import export_to_transformers, files, marian
    from keras_attn.models import Transformer

    model = Transformer.from_preset(str(directory))
    tokenizer = marian.load_tokenizer(directory, files.read_config(directory))
    exported = export_to_transformers(model, tokenizer, work_dir / "marian_export")
    ctranslate2.converters.TransformersConverter(str(exported)).convert(
        str(work_dir / "ctranslate2"), force=True
    )


def export_formats(preset, strategy, work_dir, runtimes):
    """`_export_formats`: this backend's exports of `preset`, with seconds taken."""
    from keras_attn.export import export_onnx_translator, export_translator
    from keras_attn.models import Transformer
    from keras_attn.text import SubwordTokenizer

    directory = preset_directory(preset)
    if "smoke_preset" in runtimes:  # `--smoke`: made by the first export
        runtimes = [r for r in runtimes if r != "smoke_preset"]
        if not directory.is_dir():
            make_smoke_preset(directory)
    if "smoke_marian" in runtimes:  # `--ctranslate2 --smoke`
        runtimes = [r for r in runtimes if r != "smoke_marian"]
        if not directory.is_dir():
            make_smoke_marian(directory)
    if runtimes == ["ctranslate2"]:
        start = time.perf_counter()
        export_ctranslate2(directory, work_dir)
        seconds = round(time.perf_counter() - start, 1)
        (work_dir / "ctranslate2.export_seconds").write_text(f"{seconds}\n")
        return
    model = Transformer.from_preset(directory)
    tokenizer = SubwordTokenizer.from_preset(directory)
    options = decoding_options(preset, strategy)
    backend = os.environ["KERAS_BACKEND"]
    seconds = {}
    for runtime in runtimes:
        start = time.perf_counter()
        if runtime == "savedmodel":
            target = work_dir / f"savedmodel_{backend}"
            # (the bench's own folder: an export of an older preset goes)
            export_translator(
                model,
                tokenizer,
                target,
                strategy=strategy,
                verbose=False,
                overwrite=True,
                **options,
            )
        else:
            target = work_dir / "onnxruntime"
            export_onnx_translator(
                model,
                tokenizer,
                target,
                strategy=strategy,
                length_multiple=LENGTH_MULTIPLE,
                **options,
            )
        seconds[target.name] = round(time.perf_counter() - start, 1)
        (work_dir / f"{target.name}.export_seconds").write_text(
            f"{seconds[target.name]}\n"
        )


def serve(runtime, target, strategy):
    """`_serve`: loads one runtime, then answers requests on stdin.

    Prints `@@ {"load_s": ...}` when ready; then, for each line of stdin (a
    JSON list of sentences), `@@ {"seconds": ..., "texts": [...]}` with the
    time of the translation call alone. Only the Keras runtime imports Keras.
    """
    start = time.perf_counter()
    if runtime == "keras":
        from keras_attn.text import Translator

        translator = Translator.from_preset(
            str(preset_directory(target)),
            strategy=strategy,
            length_multiple=LENGTH_MULTIPLE,
            **decoding_options(target, strategy),
        )
        translate = translator.translate
    elif runtime == "savedmodel":
        import tensorflow as tf
        import tensorflow_text  # noqa: F401 (registers the SentencePiece ops)

        function = tf.saved_model.load(target).signatures["serving_default"]

        def translate(sentences):
            outputs = function(sentences=tf.constant(sentences, tf.string))
            return [t.decode("utf-8") for t in outputs["translations"].numpy()]
    elif runtime == "ctranslate2":
        translate = ctranslate2_client(Path(target), strategy)
    else:
        sys.path.insert(0, target)  # the client copied beside the model
        from onnx_translator import OnnxTranslator

        translate = OnnxTranslator(target).translate
    load_seconds = time.perf_counter() - start
    if runtime != "keras":
        assert "keras_attn" not in sys.modules
    if runtime == "onnx":
        loaded = {m.split(".")[0] for m in sys.modules} & set(FRAMEWORKS)
        assert not loaded, f"the ONNX client imported {sorted(loaded)}"
    print(PROTOCOL + json.dumps({"load_s": round(load_seconds, 2)}), flush=True)
    for line in sys.stdin:
        sentences = json.loads(line)
        start = time.perf_counter()
        texts = translate(sentences)
        seconds = time.perf_counter() - start
        print(PROTOCOL + json.dumps({"seconds": seconds, "texts": texts}), flush=True)


def ctranslate2_client(work_dir, strategy):
    """`translate(sentences)` of the CTranslate2 conversion in `work_dir`.

    Tokenized by `transformers.MarianTokenizer` (the exported files);
    greedy is `beam_size=1`, beam search the preset's beam size. At most
    `source length + 50` tokens, as our decoding.
    """
    import ctranslate2
    import transformers

    tokenizer = transformers.MarianTokenizer.from_pretrained(work_dir / "marian_export")
    engine = ctranslate2.Translator(
        str(work_dir / "ctranslate2"), device="cpu", intra_threads=os.cpu_count()
    )
    beam_size = (
        1
        if strategy == "greedy"
        else decoding_options(str(work_dir), "beam")["beam_size"]
    )

    def translate(sentences):
        sources = [
            tokenizer.convert_ids_to_tokens(tokenizer(s).input_ids) for s in sentences
        ]
        # Our `Translator` pads sources to a multiple of LENGTH_MULTIPLE and
        # decodes at most that + 50 tokens: the same limit here.
        longest = max(len(s) for s in sources)
        padded = -(-longest // LENGTH_MULTIPLE) * LENGTH_MULTIPLE
        results = engine.translate_batch(
            sources,
            beam_size=beam_size,
            max_decoding_length=padded + 50,
            min_decoding_length=0,  # as ours: an empty translation is allowed
        )
        # As our detokenizer: special tokens left out.
        return [
            tokenizer.decode(
                tokenizer.convert_tokens_to_ids(r.hypotheses[0]),
                skip_special_tokens=True,
            )
            for r in results
        ]

    return translate


class Worker:
    """A `_serve` subprocess: `request(sentences)` -> `(seconds, texts)`."""

    def __init__(self, name, runtime, backend, target, strategy, log_dir):
        env = dict(os.environ, TF_CPP_MIN_LOG_LEVEL="3", KERAS_BACKEND=backend)
        if runtime == "keras" and backend == "jax":
            # As the recipes and bench/common.select_backend run JAX.
            from keras_attn_recipes.host_memory import MALLOC_ENVIRONMENT

            env.update(MALLOC_ENVIRONMENT)
        self.name = name
        self.log = open(log_dir / f"{name}.stderr", "w")  # noqa: SIM115
        command = [sys.executable, __file__, "_serve", runtime, str(target), strategy]
        self.process = subprocess.Popen(
            command,
            env=env,
            stdin=subprocess.PIPE,
            stdout=subprocess.PIPE,
            stderr=self.log,
            text=True,
            cwd=ROOT,
        )
        self.load_s = self._answer()["load_s"]

    def _answer(self):
        for line in self.process.stdout:
            if line.startswith(PROTOCOL):
                return json.loads(line[len(PROTOCOL) :])
        self.log.flush()
        tail = Path(self.log.name).read_text()[-4000:]
        sys.exit(f"{self.name} stopped:\n{tail}")

    def request(self, sentences):
        self.process.stdin.write(json.dumps(sentences) + "\n")
        self.process.stdin.flush()
        answer = self._answer()
        return answer["seconds"], answer["texts"]

    def close(self):
        self.process.stdin.close()
        self.process.wait(timeout=60)
        self.log.close()


def preset_fingerprint(preset):
    """SHA-256 of the preset's config and weights (`None` before it exists)."""
    directory = preset_directory(preset)
    if not directory.is_dir():
        return None
    digest = hashlib.sha256()
    for name in ("config.json", "model.weights.h5", "model.safetensors"):
        if (directory / name).is_file():  # (a Marian checkpoint: safetensors)
            digest.update((directory / name).read_bytes())
    return digest.hexdigest()


def export_all_formats(preset, strategy, rows, work_dir):
    """Exports each backend's artifacts once; a rerun reuses them only while
    the preset's config and weights are the ones they were exported from."""
    fingerprint = preset_fingerprint(preset)
    by_backend, exported = {}, []
    for name in rows:
        runtime, backend = FORMAT_ROWS[name]
        if runtime == "keras":
            continue
        stamp = work_dir / f"{name}.preset_sha256"
        current = (
            fingerprint is not None
            and (work_dir / f"{name}.export_seconds").exists()
            and stamp.exists()
            and stamp.read_text().strip() == fingerprint
        )
        if not current:
            by_backend.setdefault(backend, []).append(runtime)
            exported.append(stamp)
    for backend, runtimes in by_backend.items():
        if not preset_directory(preset).is_dir():
            runtimes.append("smoke_marian" if "ctranslate2" in rows else "smoke_preset")
        print(f"exporting {', '.join(runtimes)} on {backend} ...", flush=True)
        command = [sys.executable, __file__, "_export_formats", preset, strategy]
        _run([*command, work_dir, *runtimes], backend=backend, cwd=ROOT)
    fingerprint = preset_fingerprint(preset)  # (a smoke preset exists now)
    for stamp in exported:
        stamp.write_text(f"{fingerprint}\n")


def measure_formats(preset, strategy, rows, work_dir, requests):
    """Warm-up pass, then timed passes with the rows' order rotated."""
    workers = {}
    for name in rows:
        runtime, backend = FORMAT_ROWS[name]
        target = preset if runtime == "keras" else work_dir / name
        if runtime == "ctranslate2":
            target = work_dir  # the export and the conversion
        workers[name] = Worker(name, runtime, backend, target, strategy, work_dir)
        print(f"{name}: loaded in {workers[name].load_s} s", flush=True)
    try:
        for worker in workers.values():
            for sentences in requests:
                worker.request(sentences)
        seconds = {name: [] for name in rows}
        texts = {name: [] for name in rows}
        for index, sentences in enumerate(requests):
            shift = index % len(rows)
            for name in rows[shift:] + rows[:shift]:
                took, translated = workers[name].request(sentences)
                seconds[name].append(took)
                texts[name].extend(translated)
    finally:
        for worker in workers.values():
            worker.close()
    return {name: worker.load_s for name, worker in workers.items()}, seconds, texts


def formats_main(argv):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--formats", action="store_true", required=True)
    parser.add_argument("--preset", default="multi30k_en_de")
    parser.add_argument(
        "--strategies",
        nargs="+",
        default=["greedy", "beam"],
        choices=["greedy", "beam"],
    )
    parser.add_argument(
        "--backend",
        choices=["jax", "tensorflow"],
        help="Keras and SavedModel rows of this backend only (ONNX Runtime "
        "always: it is exported on TensorFlow). Default: both backends.",
    )
    parser.add_argument("--work-dir", type=Path, default=None)
    parser.add_argument("--runs", type=int, default=40, help="Batch-1 requests.")
    parser.add_argument("--batch-runs", type=int, default=6, help="Batch requests.")
    parser.add_argument("--batch-size", type=int, default=32)
    parser.add_argument(
        "--smoke",
        action="store_true",
        help="a random tiny preset, greedy, 1 + 1 requests (of batch 1 and 4)",
    )
    parser.add_argument(
        "--ctranslate2",
        action="store_true",
        help="Keras against CTranslate2 on a Marian checkpoint (--preset "
        "hf://owner/name or its directory)",
    )
    args = parser.parse_args(argv)
    if args.smoke:
        args.strategies, args.runs, args.batch_runs, args.batch_size = (
            ["greedy"],
            1,
            1,
            4,
        )
    work_dir = args.work_dir or Path(
        tempfile.mkdtemp(prefix="serving_smoke_")
        if args.smoke
        else "runs/bench_serving_formats"
    )
    work_dir = work_dir.resolve()
    work_dir.mkdir(parents=True, exist_ok=True)
    if args.smoke:
        args.preset = str(work_dir / "smoke_preset")  # made by the first export
    elif args.preset.startswith("hf://"):
        from keras_attn.hf.files import resolve_checkpoint

        args.preset = str(resolve_checkpoint(args.preset))
    if args.ctranslate2 and not args.smoke and not is_marian(args.preset):
        parser.error(f"--ctranslate2 needs a Marian checkpoint; got {args.preset}")

    def selected(runtime, backend):
        if runtime == "ctranslate2":
            return args.ctranslate2
        if args.ctranslate2 and runtime != "keras":
            return False  # SavedModel and ONNX need our SubwordTokenizer
        return runtime == "onnx" or args.backend in (None, backend)

    rows = [name for name, row in FORMAT_ROWS.items() if selected(*row)]
    sys.path.insert(0, str(ROOT / "bench"))
    from common import load_line

    machine = machine_line()
    print(machine)
    print(load_line("before"), flush=True)
    with gzip.open(TEST_SOURCES, "rt", encoding="utf-8") as file:
        sentences = file.read().splitlines()
    # Batch 1: the first `runs` test sentences; batches: the next ones.
    singles = [[s] for s in sentences[: args.runs]]
    size = args.batch_size
    batches = [
        sentences[args.runs + i * size : args.runs + (i + 1) * size]
        for i in range(args.batch_runs)
    ]
    summary = {"machine": machine, "preset": args.preset, "strategies": {}}
    for strategy in args.strategies:
        strategy_dir = work_dir / strategy
        strategy_dir.mkdir(exist_ok=True)
        export_all_formats(args.preset, strategy, rows, strategy_dir)
        loads, seconds, texts = measure_formats(
            args.preset, strategy, rows, strategy_dir, singles + batches
        )
        results = {}
        for name in rows:
            results[name] = {
                "load_s": loads[name],
                "batch_1_ms": round(
                    1000 * statistics.median(seconds[name][: args.runs]), 1
                ),
                f"batch_{size}_sentences_per_s": round(
                    size / statistics.median(seconds[name][args.runs :]), 1
                ),
                "translations": texts[name],
            }
            export_file = strategy_dir / f"{name}.export_seconds"
            if export_file.exists():
                results[name]["export_s"] = float(export_file.read_text())
        summary["strategies"][strategy] = results
        print_formats_table(strategy, results, rows, size, args.preset)
    summary["load_after"] = load_line("after")
    print(summary["load_after"])
    # One file per set of strategies: a greedy-only rerun keeps a beam run's.
    name = f"serving_formats_{'_'.join(args.strategies)}.json"
    (work_dir / name).write_text(json.dumps(summary, indent=2))


def machine_line():
    """The CPU's model name, its flags that matter here, and the versions."""
    from importlib.metadata import PackageNotFoundError, version

    model, flags = platform.processor() or "unknown CPU", set()
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            key, _, value = line.partition(":")
            if key.strip() == "model name":
                model = value.strip()
            elif key.strip() == "flags":
                flags = set(value.split())
    except OSError:
        pass
    features = "AVX-512" if "avx512f" in flags else "no AVX-512"
    versions = []
    for package in ("keras", "tensorflow", "jax", "onnxruntime", "ctranslate2"):
        try:
            versions.append(f"{package} {version(package)}")
        except PackageNotFoundError:
            pass
    return f"machine: {os.cpu_count()} CPUs, {model} ({features}); " + ", ".join(
        versions
    )


def print_formats_table(strategy, results, rows, size, preset):
    """Markdown table; ratios against the first row (Keras on JAX if run)."""
    reference = results[rows[0]]
    throughput = f"batch_{size}_sentences_per_s"
    print(f"\n{preset}, {strategy} search; ratios against {rows[0]}")
    print(
        f"| runtime | export s | load s | batch 1 ms | ratio | batch {size} "
        "sentences/s | ratio | same text |"
    )
    print("|---|---|---|---|---|---|---|---|")
    for name in rows:
        result = results[name]
        same = sum(
            a == b for a, b in zip(result["translations"], reference["translations"])
        )
        latency_ratio = result["batch_1_ms"] / reference["batch_1_ms"]
        throughput_ratio = result[throughput] / reference[throughput]
        print(
            f"| {ROW_TITLES[name]} | {result.get('export_s', '-')} | "
            f"{result['load_s']} | {result['batch_1_ms']} | {latency_ratio:.2f} | "
            f"{result[throughput]} | {throughput_ratio:.2f} | "
            f"{same}/{len(reference['translations'])} |"
        )


if __name__ == "__main__":
    command = sys.argv[1] if len(sys.argv) > 1 else None
    if command == "_export":
        export_unbucketed(Path(sys.argv[2]), Path(sys.argv[3]))
    elif command == "_measure":
        print(json.dumps(measure(Path(sys.argv[2]), *map(int, sys.argv[3:5]))))
    elif command == "_export_formats":
        export_formats(sys.argv[2], sys.argv[3], Path(sys.argv[4]), sys.argv[5:])
    elif command == "_serve":
        serve(*sys.argv[2:5])
    else:
        main()
