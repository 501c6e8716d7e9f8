"""The work behind `translate_multi30k.py`: train, evaluate, translate."""

import dataclasses
import json
import math
import os
import time
from pathlib import Path

import keras
import numpy as np

import keras_attn
from keras_attn.file_safety import (
    open_regular_file,
    replace_directory,
    write_atomically,
    write_text_atomically,
)
from keras_attn.text import (
    MULTI30K_DIR,
    EpochSeededShuffle,
    SubwordTokenizer,
    Translator,
    corpus_bleu,
    load_parallel_corpus,
    make_translation_dataset,
    padding_statistics,
    repeat_batches,
)
from keras_attn.training import (
    AtomicBackupAndRestore,
    MaskedAccuracy,
    MaskedSparseCategoricalCrossentropy,
    RDropLoss,
    TransformerSchedule,
    average_checkpoints,
    paper_adam,
)
from keras_attn.training.checkpoint_averaging import last_epoch_checkpoints
from keras_attn_recipes.cli_io import PresetError, RunDirectoryError
from keras_attn_recipes.epoch_records import (
    checkpoint_epochs,
    checkpoint_name,
    repair_epoch_records,
)
from keras_attn_recipes.plots import plot_attention, plot_learning_curves
from keras_attn_recipes.translation_config import TranslationConfig, check_resumable
from keras_attn_recipes.update_budget import UpdateBudget, fit_epochs
from keras_attn_recipes.zoo_common import time_budget_callback


def _load(data_dir, split, limit=None):
    sources, targets = load_parallel_corpus(data_dir or MULTI30K_DIR, split)
    if limit is not None:
        sources, targets = sources[:limit], targets[:limit]
    return sources, targets


def _tokenizer(config, output_dir, sources, targets):
    directory = output_dir / "tokenizer"
    if (directory / "tokenizer.model").exists():
        return SubwordTokenizer.load(directory)
    start = time.time()
    tokenizer = SubwordTokenizer.train(
        sources + targets, vocabulary_size=config.vocabulary_size, seed=config.seed
    )
    # Whole or not at all: a kill mid-save would leave a `tokenizer.model`
    # that the next run loads as if it were complete.
    replace_directory(directory, tokenizer.save)
    print(
        f"Trained a {tokenizer.vocabulary_size}-piece SentencePiece vocabulary "
        f"in {time.time() - start:.1f} s."
    )
    return tokenizer


def learning_rate_schedule(config, hidden_dim):
    paper = TransformerSchedule(
        hidden_dim, config.warmup_steps, scale=config.learning_rate_scale
    )
    if config.learning_rate_decay == "inverse_sqrt":
        return paper
    # The paper's peak, reached at the end of its warm-up; cosine to zero.
    peak = config.learning_rate_scale * (hidden_dim * config.warmup_steps) ** -0.5
    return keras.optimizers.schedules.CosineDecay(
        initial_learning_rate=0.0,
        decay_steps=max(config.train_steps - config.warmup_steps, 1),
        warmup_target=peak,
        warmup_steps=config.warmup_steps,
    )


def build_model(config, vocabulary_size):
    model = keras_attn.models.Transformer.from_preset(
        config.preset, vocabulary_size=vocabulary_size, **config.model_overrides()
    )
    model.compile(
        optimizer=paper_adam(
            learning_rate=learning_rate_schedule(config, model.hidden_dim)
        ),
        loss=_loss(config, model.pad_id),
        metrics=[MaskedAccuracy(ignore_class=model.pad_id)],
        steps_per_execution=config.steps_per_execution,
    )
    return model


def _loss(config, pad_id):
    if config.r_drop_alpha:
        return RDropLoss(
            alpha=config.r_drop_alpha,
            label_smoothing=config.label_smoothing,
            ignore_class=pad_id,
        )
    return MaskedSparseCategoricalCrossentropy(
        label_smoothing=config.label_smoothing, ignore_class=pad_id
    )


def _bucket_batch_sizes(config):
    """The batch sizes `make_translation_dataset` uses (one per length bucket)."""
    return [config.max_tokens_per_batch // n for n in config.bucket_boundaries()]


def _check_batches_split_evenly(distribution, config):
    """Every bucket's batch must split evenly over the data-parallel replicas."""
    try:
        distribution.check_batch_size(
            _bucket_batch_sizes(config),
            name="max_tokens_per_batch // bucket length",
        )
    except ValueError as error:
        step = math.lcm(*config.bucket_boundaries()) * distribution.num_replicas
        raise ValueError(
            f"{error}. Use `--set max_tokens_per_batch=N` with N a multiple of {step}."
        ) from None


def _check_r_drop_on_one_replica(distribution, config):
    if config.r_drop_alpha and distribution.num_replicas > 1:
        raise ValueError(
            "`r_drop_alpha` pairs the two halves of each batch, which data "
            "parallelism would split between devices; train R-Drop on one "
            f"device. Received: r_drop_alpha={config.r_drop_alpha}, "
            f"{distribution.num_replicas} replicas"
        )


class TrainingDiverged(RuntimeError):
    """The loss became NaN or infinite; the last good backup is kept."""


def _configure_distribution(config, distribute, mesh):
    """`keras_attn.distribution.configure`, refused where this recipe can't run."""
    # First, before anything runs on a device (multi-process set-up needs it).
    distribution = keras_attn.distribution.configure(distribute, mesh_shape=mesh)
    _check_r_drop_on_one_replica(distribution, config)
    if distribution.num_processes > 1:
        raise ValueError(
            "This recipe trains in one process (its length-bucketed batches "
            "cannot be split between processes); see docs/distribution.md. "
            f"Received: {distribution.num_processes} processes"
        )
    _check_batches_split_evenly(distribution, config)
    return distribution


def _translation_datasets(config, tokenizer, train_pairs, val_pairs, epoch_shuffle):
    """The shuffled, bucketed training dataset and the validation one."""

    def dataset(pairs, shuffle):
        sources, targets = pairs
        data = make_translation_dataset(
            sources,
            targets,
            tokenizer,
            max_tokens_per_batch=config.max_tokens_per_batch,
            max_length=config.max_length,
            bucket_boundaries=config.bucket_boundaries(),
            shuffle=shuffle,
            seed=config.seed,
            pad_remainder=True,
            shuffle_epoch=epoch_shuffle if shuffle else None,
            # Sampled segmentations for training; validation uses the best.
            subword_nbest_size=config.subword_nbest_size if shuffle else 1,
            subword_alpha=config.subword_alpha,
        )
        # R-Drop's two passes: validation too, where (without dropout) the
        # halves agree and the loss is the plain cross-entropy.
        return repeat_batches(data) if config.r_drop_alpha else data

    return dataset(train_pairs, True), dataset(val_pairs, False)


def _resumed_epochs_and_updates(backup, batches_per_epoch, output_dir):
    resumed_epochs = backup.completed_epochs()
    resumed_updates = backup.completed_updates()
    if resumed_updates is None:  # A backup from before updates were counted.
        resumed_updates = resumed_epochs * batches_per_epoch
    if resumed_epochs:
        print(
            f"Resuming after epoch {resumed_epochs} ({resumed_updates:,} "
            f"updates) from {output_dir / 'backup'}."
        )
    return resumed_epochs, resumed_updates


class AtomicEpochCheckpoint(keras.callbacks.Callback):
    """`checkpoints/epoch_NNN.keras` at each epoch's end, written atomically.

    `keras.callbacks.ModelCheckpoint` writes the file in place: a kill or a
    full disk mid-write leaves a truncated checkpoint that `evaluate
    --average-last` and `save-preset` would read. This one writes beside
    it and renames (`keras_attn.file_safety.write_atomically`).

    With `resumed_epoch=N`, for a `fit` that resumes from a backup of N
    epochs whose checkpoint is missing (`repair_epoch_records`), it first
    writes `epoch_NNN.keras` from the restored weights: at the first epoch's
    start, or at the end of a `fit` with no epoch left, when every
    callback's `on_train_begin` (the backup's restore among them) has run.
    """

    def __init__(self, directory, resumed_epoch=None):
        super().__init__()
        self.directory = Path(directory)
        self.resumed_epoch = resumed_epoch

    def _write(self, epoch):
        write_atomically(self.directory / checkpoint_name(epoch), self.model.save)

    def on_epoch_begin(self, epoch, logs=None):
        resumed, self.resumed_epoch = self.resumed_epoch, None
        # `epoch` counts from 0: the first epoch of a `fit` resumed after N
        # epochs is N, and the model holds the weights restored for it.
        if resumed is not None and epoch == resumed:
            self._write(resumed)

    def on_train_end(self, logs=None):
        if self.resumed_epoch is not None:  # No epoch ran: still restored.
            self._write(self.resumed_epoch)
            self.resumed_epoch = None

    def on_epoch_end(self, epoch, logs=None):
        self._write(epoch + 1)


def _claimed(path):
    """`path`, created empty if missing, after checking it is a regular file.

    `keras.callbacks.CSVLogger` appends with a plain `open`, which follows a
    symbolic link: a link or a special file planted at `path` is refused
    here first (`keras_attn.file_safety.open_regular_file`), and the run
    directory's lock keeps other writers out until training ends.
    """
    os.close(open_regular_file(path, os.O_WRONLY | os.O_APPEND | os.O_CREAT))
    return path


def _training_callbacks(
    config, output_dir, model, epoch_shuffle, backup, updates, rewrite_epoch=None
):
    # The backup marks an epoch done only after every callback's
    # `on_epoch_end` (`AtomicBackupAndRestore`), wherever it stands here.
    return [
        epoch_shuffle,
        backup,
        # After the backup, whose restored update count it starts from;
        # before CSVLogger, which then records `updates` per epoch.
        UpdateBudget(
            updates,
            log_path=output_dir / "updates.csv",
            learning_rate=learning_rate_schedule(config, model.hidden_dim),
        ),
        AtomicEpochCheckpoint(output_dir / "checkpoints", resumed_epoch=rewrite_epoch),
        keras.callbacks.CSVLogger(
            str(_claimed(output_dir / "history.csv")), append=True
        ),
        keras.callbacks.TensorBoard(str(output_dir / "logs"), update_freq=50),
        # Raising (not just stopping) skips the end-of-epoch saves, so the
        # backup and checkpoints keep the last finite weights.
        keras.callbacks.TerminateOnNaN(raise_error=True),
        time_budget_callback(config.time_budget_minutes),
    ]


def _fit(model, train_data, validation_data, epochs, callbacks, backup, config):
    """`model.fit`; a NaN loss becomes `TrainingDiverged`, naming the backup."""
    try:
        model.fit(
            train_data,
            shuffle=False,  # the dataset shuffles (EpochSeededShuffle)
            validation_data=validation_data,
            epochs=epochs,
            callbacks=callbacks,
            verbose=2 if config.preset == "transformer_tiny" else "auto",
        )
    except RuntimeError as error:
        if "NaN or Inf loss" not in str(error):
            raise
        raise TrainingDiverged(
            f"Training stopped: {error} The last good state (after epoch "
            f"{backup.completed_epochs()}) is kept in {backup.backup_dir} "
            "and the checkpoints; lower the learning rate (--set "
            "learning_rate_scale=...) and run `train` again to resume."
        ) from error


def _save_results(model, output_dir, minutes, resumed_updates):
    """`model.keras`, the learning curves and `training.json`.

    `minutes` is this process's training time: a resumed run's record says
    after how many updates it resumed (`resumed_after_updates`), since the
    time before that is not counted.
    """
    write_atomically(output_dir / "model.keras", model.save)
    summary = {
        "training_minutes": round(minutes, 2),
        "updates": int(model.optimizer.iterations),
        "parameters": model.count_params(),
    }
    resumed = ""
    if resumed_updates:
        summary["resumed_after_updates"] = resumed_updates
        resumed = f" (resumed after {resumed_updates:,} updates)"
    write_text_atomically(output_dir / "training.json", json.dumps(summary, indent=2))
    # Last: a picture, after the results it must not keep from being saved.
    plot_learning_curves(
        output_dir / "history.csv",
        output_dir / "learning_curves.png",
        updates_csv=output_dir / "updates.csv",
    )
    print(
        f"Trained for {minutes:.1f} min{resumed}; saved {output_dir / 'model.keras'}."
    )


def train(
    config: TranslationConfig, output_dir, data_dir=None, distribute="none", mesh=None
):
    # Before anything is written: a run directory keeps the settings it has.
    check_resumable(config, output_dir)
    distribution = _configure_distribution(config, distribute, mesh)
    output_dir = Path(output_dir)
    output_dir.mkdir(parents=True, exist_ok=True)
    write_text_atomically(
        output_dir / "config.json", json.dumps(dataclasses.asdict(config), indent=2)
    )
    keras.utils.set_random_seed(config.seed)
    train_pairs = _load(data_dir, "train", config.train_pairs)
    val_pairs = _load(data_dir, "val", config.evaluation_pairs)
    print(f"Backend {keras.backend.backend()}; {len(train_pairs[0])} training pairs.")
    tokenizer = _tokenizer(config, output_dir, *train_pairs)
    # Each epoch's batch order is a function of (seed, epoch), so a resumed
    # run trains on the batches an uninterrupted one would have.
    epoch_shuffle = EpochSeededShuffle()
    train_data, validation_data = _translation_datasets(
        config, tokenizer, train_pairs, val_pairs, epoch_shuffle
    )
    stats = padding_statistics(train_data)
    print("Padding share of training batches:", json.dumps(stats))
    batches_per_epoch = stats["batches"]
    total_updates = config.train_steps or config.epochs * batches_per_epoch
    print(f"Distribution: {distribution}")
    # Build, compile and fit in the scope: on JAX it lays out the variables
    # and shards every batch; on TensorFlow it is the strategy's scope.
    with distribution.scope():
        model = build_model(config, tokenizer.vocabulary_size)
        print(f"Model: {model.count_params():,} parameters.")
        (output_dir / "checkpoints").mkdir(exist_ok=True)
        backup = AtomicBackupAndRestore(output_dir / "backup", delete_checkpoint=False)
        resumed_epochs, resumed_updates = _resumed_epochs_and_updates(
            backup, batches_per_epoch, output_dir
        )
        # Records of epochs the backup does not count go; a missing
        # checkpoint of the epoch resumed after is written again.
        rewrite = repair_epoch_records(output_dir, resumed_epochs, resumed_updates)
        epochs = fit_epochs(
            total_updates, batches_per_epoch, resumed_epochs, resumed_updates
        )
        print(
            f"Training for {total_updates:,} updates: {epochs} epochs of "
            f"{batches_per_epoch} batches (the last one cut short where needed)."
        )
        callbacks = _training_callbacks(
            config,
            output_dir,
            model,
            epoch_shuffle,
            backup,
            total_updates,
            rewrite_epoch=resumed_epochs if rewrite else None,
        )
        start = time.time()
        _fit(model, train_data, validation_data, epochs, callbacks, backup, config)
    _save_results(model, output_dir, (time.time() - start) / 60, resumed_updates)
    return model


def load_config(output_dir):
    """The `TranslationConfig` a run directory was trained with."""
    path = Path(output_dir) / "config.json"
    try:
        stored = json.loads(path.read_text(encoding="utf-8"))
    except FileNotFoundError:
        raise RunDirectoryError(
            f"{path} is missing: {output_dir} is not a complete run directory "
            "of `train` (run `train` with this --output-dir first)."
        ) from None
    except (OSError, UnicodeDecodeError, json.JSONDecodeError) as error:
        raise RunDirectoryError(
            f"{path} is not a readable run configuration ({error}). Expected "
            "the JSON object `train` writes; train the run again, or choose "
            "another --output-dir."
        ) from None
    if not isinstance(stored, dict):
        raise RunDirectoryError(
            f"{path} must hold a JSON object of settings. Received: "
            f"{type(stored).__name__} {stored!r:.100}"
        )
    known = {field.name for field in dataclasses.fields(TranslationConfig)}
    # Run directories from before training was counted in updates.
    if stored.get("train_steps") is None and stored.get("epochs") is None:
        stored["epochs"] = 1
    try:
        return TranslationConfig(**{k: v for k, v in stored.items() if k in known})
    except (TypeError, ValueError) as error:
        raise RunDirectoryError(f"{path} holds an invalid setting: {error}") from None


def _trained_epochs(output_dir):
    """How many epochs the run trained: the backup's count (`train` keeps
    it), else the highest epoch checkpoint (a run directory without a
    readable backup)."""
    backup = AtomicBackupAndRestore(output_dir / "backup", delete_checkpoint=False)
    try:
        completed = backup.completed_epochs()
    except ValueError:  # Unreadable: `train` says so; the checkpoints remain.
        completed = 0
    return completed or max(checkpoint_epochs(output_dir), default=0)


def _last_checkpoints(output_dir, average_last):
    """The checkpoints of the run's last `average_last` epochs, each there.

    A missing one (a gap left by a kill) is a `RunDirectoryError` naming
    the epoch, never made up for by an older epoch's checkpoint.
    """
    directory = output_dir / "checkpoints"
    trained = _trained_epochs(output_dir)
    if average_last > trained:
        raise RunDirectoryError(
            f"`average_last` asks for {average_last} checkpoints, but the run "
            f"trained {trained} epochs ({directory} holds "
            f"{len(checkpoint_epochs(output_dir))}). Received: "
            f"average_last={average_last}"
        )
    try:
        return last_epoch_checkpoints(directory, average_last, trained)
    except ValueError as error:
        raise RunDirectoryError(
            f"{error} Average only epochs after the missing one (a smaller "
            "--average-last), or train the run again in a new --output-dir."
        ) from None


def load_translator(output_dir, strategy="beam", average_last=None):
    """A `Translator` for a trained run; `average_last=None` uses the setting's
    `average_checkpoints`, or all the epochs there are when a short run
    (`--set train_steps=...`) trained fewer, saying so. An `average_last`
    given explicitly must be there. The averaged checkpoints are those of
    the run's last epochs, each one there (`_last_checkpoints`)."""
    output_dir = Path(output_dir)
    model_path = output_dir / "model.keras"
    if not model_path.exists():
        raise FileNotFoundError(
            f"No trained model at {model_path}: run the `train` subcommand first."
        )
    config = load_config(output_dir)
    if average_last is None:
        average_last = config.average_checkpoints
        trained = _trained_epochs(output_dir)
        if 1 <= trained < average_last:
            print(
                f"The setting averages the last {average_last} epoch checkpoints; "
                f"this run wrote {trained}: averaging those."
            )
            average_last = trained
    model = keras_attn.saving.load_model(model_path)
    if average_last > 1:
        paths = _last_checkpoints(output_dir, average_last)
        print(f"Averaging the weights of {[p.name for p in paths]}.")
        average_checkpoints(model, paths)
    tokenizer = SubwordTokenizer.load(output_dir / "tokenizer")
    options = {}
    if strategy == "beam":
        options = dict(
            beam_size=config.beam_size, length_penalty_alpha=config.length_penalty_alpha
        )
    return Translator(model, tokenizer, strategy=strategy, **options), config


def evaluate(
    output_dir,
    data_dir=None,
    split="test_2016_flickr",
    strategy="beam",
    average_last=None,
    validation=False,
):
    """Translates `split` (and with `validation=True`, first `val`) and
    reports sacreBLEU and chrF; returns the report of `split`."""
    output_dir = Path(output_dir)
    translator, config = load_translator(output_dir, strategy, average_last)
    if average_last is None:
        average_last = config.average_checkpoints
    for name in (["val"] if validation and split != "val" else []) + [split]:
        report, first_source = _evaluate_split(
            translator,
            config.evaluation_pairs,
            output_dir,
            data_dir,
            name,
            strategy,
            average_last,
        )
    save_attention_plot(translator, first_source, output_dir / "cross_attention.png")
    return report


def translate_with_progress(translator, sources, chunk=256):
    """`translator.translate(sources)` in chunks, with a progress bar."""
    progress = keras.utils.Progbar(len(sources), unit_name="sentence")
    hypotheses = []
    for begin in range(0, len(sources), chunk):
        hypotheses += translator.translate(sources[begin : begin + chunk])
        progress.update(len(hypotheses))
    return hypotheses


def _evaluate_split(
    translator, limit, output_dir, data_dir, split, strategy, average_last
):
    """Scores the first `limit` pairs of `split` (all with `None`); writes the
    translations and scores into `output_dir` unless it is `None`."""
    sources, references = _load(data_dir, split, limit)
    start = time.time()
    hypotheses = translate_with_progress(translator, sources)
    seconds = time.time() - start
    report = corpus_bleu(hypotheses, references)
    averaged = f", average of the last {average_last}" if average_last > 1 else ""
    print(
        f"\n{split} ({len(sources)} sentences, {strategy}{averaged}, "
        f"{seconds:.0f} s):\n{report}"
    )
    if output_dir is None:
        return report, sources[0]
    stem = f"{split}.{strategy}" + (f".avg{average_last}" if average_last > 1 else "")
    write_text_atomically(output_dir / f"{stem}.de", "\n".join(hypotheses) + "\n")
    write_text_atomically(
        output_dir / f"{stem}.bleu.json",
        json.dumps(
            {**dataclasses.asdict(report), "seconds": round(seconds, 1)}, indent=2
        ),
    )
    return report, sources[0]


def cross_attention(model, source_ids, target_ids):
    """Last decoder layer's cross-attention `(heads, target, source)` of one pair."""
    encoder_tokens = np.asarray([source_ids], "int32")
    decoder_tokens = np.asarray([target_ids], "int32")
    encoder_output, encoder_mask = model.encode(encoder_tokens)
    hidden = model.token_embedding(decoder_tokens)
    for block in model.decoder_blocks:
        hidden, scores = block(
            hidden,
            encoder_output,
            encoder_padding_mask=encoder_mask,
            return_attention_scores=True,
        )
    return keras.ops.convert_to_numpy(scores)[0]


def save_attention_plot(translator, sentence, path):
    tokenizer = translator.tokenizer
    source_ids = translator.encode_sources([sentence])[0]
    output_ids, _ = translator.translate_ids([sentence])
    target = [tokenizer.start_id] + [i for i in output_ids[0] if i != tokenizer.pad_id]
    if tokenizer.end_id in target:
        target = target[: target.index(tokenizer.end_id)]
    scores = cross_attention(translator.model, source_ids, target).mean(axis=0)
    plot_attention(
        scores,
        tokenizer.id_to_piece(source_ids),
        tokenizer.id_to_piece(target[1:] + [tokenizer.end_id]),
        path,
        title="Cross-attention, last decoder layer (mean over heads)",
    )
    print(f"Saved the cross-attention heat map to {path}.")


def translate(output_dir, sentences, strategy="beam"):
    translator, _ = load_translator(output_dir, strategy)
    return translator.translate(sentences)


def print_translations(output_dir, sentences, strategy="beam"):
    for source, target in zip(sentences, translate(output_dir, sentences, strategy)):
        print(f"EN: {source}\nDE: {target}\n")


def export(output_dir, export_dir, strategy="beam"):
    """Writes the trained translator as a text-in, text-out SavedModel."""
    translator, config = load_translator(output_dir, strategy)
    return _export(
        translator, export_dir, strategy, config.beam_size, config.length_penalty_alpha
    )


def _export(translator, export_dir, strategy, beam_size, length_penalty_alpha):
    from keras_attn.export import export_translator

    start = time.time()
    export_translator(
        translator.model,
        translator.tokenizer,
        export_dir,
        strategy=strategy,
        beam_size=beam_size,
        length_penalty_alpha=length_penalty_alpha,
    )
    print(f"Exported in {time.time() - start:.0f} s to {export_dir}.")
    return Path(export_dir)


# --- A trained preset in place of a run directory ---------------------------


def load_preset_translator(preset, strategy="beam"):
    """`Translator.from_preset(preset, strategy=...)`: with beam search, the
    preset's beam settings (`metadata.json`'s `"decoding"`). A preset that
    cannot be loaded as a translator becomes a `PresetError`."""
    try:
        return Translator.from_preset(preset, strategy=strategy)
    except (ValueError, FileNotFoundError) as error:
        raise PresetError(f"--preset: {error}") from None


def translate_preset(preset, sentences, strategy="beam"):
    return load_preset_translator(preset, strategy).translate(sentences)


def evaluate_preset(preset, data_dir=None, split="test_2016_flickr", strategy="beam"):
    """sacreBLEU and chrF of a preset on `split`, printed; nothing is written
    (a preset is only read)."""
    translator = load_preset_translator(preset, strategy)
    print(f"Preset {preset}:")
    report, _ = _evaluate_split(
        translator, None, None, data_dir, split, strategy, average_last=1
    )
    return report


def export_preset(preset, export_dir, strategy="beam"):
    """Writes a preset's translator as a text-in, text-out SavedModel, with
    the beam settings `Translator.from_preset` uses."""
    translator = load_preset_translator(preset, strategy)
    sampler = translator.generator.sampler
    # With greedy search the beam settings are unused.
    return _export(
        translator,
        export_dir,
        strategy,
        getattr(sampler, "num_beams", 4),
        getattr(sampler, "length_penalty_alpha", 0.6),
    )
