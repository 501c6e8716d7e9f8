"""Train a GPT-style language model on the English side of Multi30k.

    python recipes/language_model_multi30k.py            # the `lm_small` preset
    python recipes/language_model_multi30k.py --quick    # a tiny model (the tests)
    python recipes/language_model_multi30k.py --backend tensorflow --epochs 3
    python recipes/language_model_multi30k.py --preset lm_modern_small  # rotary, GQA, RMS, SwiGLU

A SentencePiece vocabulary is trained on the 29,000 English training
captions (`keras_attn.text.SubwordTokenizer`); each caption becomes
`[start] pieces [end]`, and a `keras_attn.models.TransformerLM` learns to
predict every next piece. The recipe prints the validation perplexity of
the untrained and of the trained model (per subword piece, and per word so
that it does not depend on the vocabulary), then continues a few prompts
with greedy decoding, top-k and top-p sampling, all with the key/value
cache. It writes into `--output-dir`: the tokenizer, `model.keras`,
`learning_curves.png`, `samples.txt` and `summary.json`.
"""

import argparse
import dataclasses
import math
import sys
import time

from keras_attn_recipes.quiet_start import quiet_start
from keras_attn_recipes.zoo_common import (
    add_common_arguments,
    fit_steps_per_execution,
    pad_to_batches,
    plot_history,
    resolve_config,
    select_backend,
    shuffled_batches,
    time_budget_callback,
    write_summary,
)

PROMPTS = ("A man", "Two dogs", "A little girl in a", "People are")


@dataclasses.dataclass(frozen=True)
class LanguageModelConfig:
    preset: str = "lm_small"
    vocabulary_size: int = 2000
    train_sentences: int | None = None  # None: all 29,000
    validation_sentences: int | None = None  # None: all 1,014
    sequence_length: int = 32  # pieces per example, start and end included
    epochs: int = 2
    batch_size: int = 64
    learning_rate: float = 2e-3
    weight_decay: float = 0.01
    warmup_steps: int = 200
    time_budget_minutes: float | None = None
    # Updates per host round trip (`compile`), at most; see
    # `fit_steps_per_execution`.
    steps_per_execution: int = 8
    top_k: int = 20
    top_p: float = 0.9
    seed: int = 0


SETTINGS = {
    "default": LanguageModelConfig(),
    "quick": LanguageModelConfig(
        preset="lm_tiny",
        vocabulary_size=400,
        train_sentences=2000,
        validation_sentences=256,
        epochs=2,
        learning_rate=5e-3,
        warmup_steps=10,
        time_budget_minutes=None,
    ),
}


def encode(tokenizer, sentences, sequence_length):
    """`[start] pieces [end]`, cut to `sequence_length` and right-padded.

    Returns int32 `(n, sequence_length)`; inputs are `[:, :-1]` and
    next-piece labels `[:, 1:]`.
    """
    import numpy as np

    pieces = tokenizer.tokenize(sentences).to_list()
    ids = np.full((len(sentences), sequence_length), tokenizer.pad_id, "int32")
    for row, sentence_pieces in enumerate(pieces):
        sequence = [tokenizer.start_id, *sentence_pieces, tokenizer.end_id]
        sequence = sequence[:sequence_length]
        ids[row, : len(sequence)] = sequence
    return ids


def corpus_log_likelihood(model, sequences, batch_size, pad_id):
    """Summed next-piece log-likelihood and the number of predicted pieces.

    Runs `predict_on_batch` on equal-shaped batches (the last one padded
    with all-padding rows) so that it compiles once.
    """
    import keras
    import numpy as np

    total, count = 0.0, 0
    for begin in range(0, len(sequences), batch_size):
        batch = sequences[begin : begin + batch_size]
        rows = len(batch)
        if rows < batch_size:
            filler = np.full((batch_size - rows, batch.shape[1]), pad_id, "int32")
            batch = np.concatenate([batch, filler])
        logits = model.predict_on_batch(batch[:, :-1])[:rows]
        labels = batch[:rows, 1:]
        log_probs = keras.ops.convert_to_numpy(
            keras.ops.log_softmax(keras.ops.cast(logits, "float32"), axis=-1)
        )
        picked = np.take_along_axis(log_probs, labels[..., None], axis=-1)[..., 0]
        real = labels != pad_id
        total += float(picked[real].sum())
        count += int(real.sum())
    return total, count


def perplexities(model, sequences, sentences, batch_size, pad_id):
    """Per-piece and per-word perplexity (a word count includes the end)."""
    log_likelihood, pieces = corpus_log_likelihood(model, sequences, batch_size, pad_id)
    words = sum(len(sentence.split()) + 1 for sentence in sentences)
    return {
        "piece_perplexity": math.exp(-log_likelihood / pieces),
        "word_perplexity": math.exp(-log_likelihood / words),
    }


def continue_prompts(model, tokenizer, prompts, config, max_length):
    """Greedy, top-k and top-p continuations, with the key/value cache."""
    import numpy as np

    from keras_attn.generation import generate_lm

    pieces = tokenizer.tokenize(list(prompts)).to_list()
    width = max(len(p) for p in pieces) + 1
    prompt_ids = np.full((len(prompts), width), tokenizer.pad_id, "int32")
    for row, prompt_pieces in enumerate(pieces):
        prompt_ids[row, : len(prompt_pieces) + 1] = [
            tokenizer.start_id,
            *prompt_pieces,
        ]
    strategies = {
        "greedy": dict(strategy="greedy"),
        f"top-k (k={config.top_k})": dict(
            strategy="sample", top_k=config.top_k, seed=config.seed
        ),
        f"top-p (p={config.top_p})": dict(
            strategy="sample", top_p=config.top_p, seed=config.seed
        ),
    }
    texts = {}
    for name, options in strategies.items():
        start = time.time()
        out = generate_lm(
            model, prompt_ids, max_length, end_id=tokenizer.end_id, **options
        )
        seconds = time.time() - start
        decoded = tokenizer.detokenize(np.asarray(out["tokens"])).numpy()
        texts[name] = [text.decode("utf-8") for text in decoded]
        print(f"\n{name} ({seconds:.1f} s, compilation included):")
        for text in texts[name]:
            print(f"  {text}")
    return texts


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser, "runs/lm_multi30k")
    parser.add_argument(
        "--preset",
        default=None,
        help="The TransformerLM preset architecture to train (default: the "
        "setting's, `lm_small`; e.g. `lm_modern_small` for rotary positions, "
        "grouped-query attention, RMS norm and SwiGLU at the same size).",
    )
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    backend = select_backend(args.backend, restart=argv is None)
    import keras

    from keras_attn.file_safety import (
        replace_directory,
        write_atomically,
        write_text_atomically,
    )
    from keras_attn.models import TransformerLM
    from keras_attn.text import SubwordTokenizer, load_multi30k
    from keras_attn.training import MaskedAccuracy, MaskedSparseCategoricalCrossentropy

    config = resolve_config(SETTINGS, args)
    if args.preset is not None:
        if args.preset not in TransformerLM.presets:
            sys.exit(
                f"error: --preset must be one of {sorted(TransformerLM.presets)}. "
                f"Received: --preset={args.preset}"
            )
        config = dataclasses.replace(config, preset=args.preset)
    output_dir = args.output_dir
    keras.utils.set_random_seed(config.seed)

    train_text, _ = load_multi30k("train")
    val_text, _ = load_multi30k("val")
    train_text = train_text[: config.train_sentences]
    val_text = val_text[: config.validation_sentences]
    start = time.time()
    tokenizer = SubwordTokenizer.train(
        train_text, vocabulary_size=config.vocabulary_size, seed=config.seed
    )
    replace_directory(output_dir / "tokenizer", tokenizer.save)
    train_ids = encode(tokenizer, train_text, config.sequence_length)
    val_ids = encode(tokenizer, val_text, config.sequence_length)
    print(
        f"Backend {backend}; {len(train_text)} training and {len(val_text)} "
        f"validation captions; a {tokenizer.vocabulary_size}-piece vocabulary "
        f"({time.time() - start:.1f} s)."
    )

    model = TransformerLM.from_preset(
        config.preset,
        vocabulary_size=tokenizer.vocabulary_size,
        max_sequence_length=config.sequence_length,
    )
    steps_per_epoch = len(train_ids) // config.batch_size
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        warmup_target=config.learning_rate,
        warmup_steps=config.warmup_steps,
        decay_steps=max(1, config.epochs * steps_per_epoch - config.warmup_steps),
        alpha=0.1,
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay),
        loss=MaskedSparseCategoricalCrossentropy(
            label_smoothing=0.0, ignore_class=tokenizer.pad_id
        ),
        metrics=[MaskedAccuracy(ignore_class=tokenizer.pad_id)],
        steps_per_execution=fit_steps_per_execution(
            config.steps_per_execution, steps_per_epoch
        ),
    )
    print(f"Model {config.preset}: {model.count_params():,} parameters.")
    before = perplexities(model, val_ids, val_text, config.batch_size, tokenizer.pad_id)
    print(
        "Untrained validation perplexity: "
        f"{before['piece_perplexity']:.1f} per piece, "
        f"{before['word_perplexity']:.1f} per word"
    )

    start = time.time()
    history = model.fit(
        # Equal-shaped batches: one compiled training and one evaluation
        # step (all-padding rows count for nothing in the masked loss).
        shuffled_batches(
            train_ids[:, :-1], train_ids[:, 1:], config.batch_size, config.seed
        ),
        steps_per_epoch=steps_per_epoch,
        shuffle=False,  # the generator shuffles
        validation_data=pad_to_batches(
            val_ids[:, :-1], val_ids[:, 1:], config.batch_size, tokenizer.pad_id
        )[:2],
        validation_batch_size=config.batch_size,
        epochs=config.epochs,
        callbacks=[time_budget_callback(config.time_budget_minutes)],
        verbose=args.verbose,
    )
    training_seconds = time.time() - start
    after = perplexities(model, val_ids, val_text, config.batch_size, tokenizer.pad_id)
    print(
        "Validation perplexity: "
        f"{after['piece_perplexity']:.2f} per piece, "
        f"{after['word_perplexity']:.2f} per word "
        f"(trained {training_seconds / 60:.1f} min)"
    )
    # Beside and renamed: a kill or a full disk leaves the old model whole.
    write_atomically(output_dir / "model.keras", model.save)
    plot_history(
        history.history,
        ("loss", "masked_accuracy"),
        output_dir / "learning_curves.png",
        f"TransformerLM ({config.preset}) on Multi30k English",
    )
    samples = continue_prompts(
        model, tokenizer, PROMPTS, config, max_length=config.sequence_length
    )
    write_text_atomically(
        output_dir / "samples.txt",
        "".join(
            f"{name}:\n" + "".join(f"  {text}\n" for text in texts)
            for name, texts in samples.items()
        ),
    )
    summary = {
        "backend": backend,
        "config": dataclasses.asdict(config),
        "parameters": model.count_params(),
        "epochs_run": len(history.history["loss"]),
        "training_seconds": round(training_seconds, 1),
        "untrained_validation": {k: round(v, 2) for k, v in before.items()},
        "validation": {k: round(v, 2) for k, v in after.items()},
        "samples": samples,
    }
    write_summary(output_dir, summary)
    return summary


if __name__ == "__main__":
    quiet_start()  # Before TensorFlow loads: no CUDA notices on a CPU.
    main()
