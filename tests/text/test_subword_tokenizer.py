import json
import unicodedata

import keras
import numpy as np
import pytest
import tensorflow as tf

from keras_attn.text import SubwordTokenizer, load_multi30k

VOCABULARY_SIZE = 300


@pytest.fixture(scope="module")
def sentences():
    sources, targets = load_multi30k("train")
    return sources[:300] + targets[:300]


@pytest.fixture(scope="module")
def tokenizer(sentences):
    return SubwordTokenizer.train(sentences, vocabulary_size=VOCABULARY_SIZE)


def _ordinary(sentences):
    """Sentences that NFKC normalization and space collapsing leave unchanged."""
    return [
        s
        for s in sentences
        if unicodedata.normalize("NFKC", s) == s and " ".join(s.split()) == s
    ]


def test_special_ids_and_size(tokenizer):
    assert tokenizer.vocabulary_size == VOCABULARY_SIZE
    ids = (tokenizer.pad_id, tokenizer.unk_id, tokenizer.start_id, tokenizer.end_id)
    assert ids == (0, 1, 2, 3)
    assert tokenizer.id_to_piece([0, 1, 2, 3]) == ["<pad>", "<unk>", "<s>", "</s>"]
    assert isinstance(tokenizer.id_to_piece(10), str)
    with pytest.raises(ValueError, match="id=300"):
        tokenizer.id_to_piece(300)


def test_round_trip_is_lossless(tokenizer, sentences):
    ordinary = _ordinary(sentences) + ["Ein Mann steht auf der Straße.", "A dog."]
    assert len(ordinary) > 550
    ids = tokenizer.tokenize(ordinary)
    assert isinstance(ids, tf.RaggedTensor) and ids.dtype == tf.int32
    # No start/end ids from tokenize; ids are in the vocabulary.
    flat = ids.flat_values.numpy()
    assert flat.min() > tokenizer.end_id and flat.max() < VOCABULARY_SIZE
    decoded = [s.decode("utf-8") for s in tokenizer.detokenize(ids).numpy()]
    assert decoded == ordinary


def test_unknown_characters_map_to_unk(tokenizer):
    ids = tokenizer.tokenize(["Ein 漢字 Hund ☃"])[0].numpy().tolist()
    assert ids.count(tokenizer.unk_id) == 2


def test_empty_string_gives_no_tokens(tokenizer):
    assert tokenizer.tokenize("").shape == (0,)
    ids = tokenizer.tokenize(["", "A dog."])
    assert ids.row_lengths().numpy()[0] == 0
    assert tokenizer.detokenize(ids).numpy()[0] == b""
    assert tokenizer.tokenize([]).nrows() == 0


def test_detokenize_stops_at_end_and_drops_pad_and_start(tokenizer):
    body = tokenizer.tokenize("A dog.").numpy().tolist()
    row = [2] + body + [3] + body + [0, 0]
    expected = [b"A dog.", b"A dog."]
    dense = np.array([row, [2] + body + [0] * (len(row) - len(body) - 1)])
    assert tokenizer.detokenize(dense).numpy().tolist() == expected
    assert tokenizer.detokenize(dense.astype("int64")).numpy().tolist() == expected
    ragged = tf.ragged.constant([row, body])
    assert tokenizer.detokenize(ragged).numpy().tolist() == expected
    assert tokenizer.detokenize(row).numpy() == b"A dog."  # A single sequence.
    # Model outputs on the current Keras backend (JAX arrays on JAX).
    backend_ids = keras.ops.convert_to_tensor(dense)
    assert tokenizer.detokenize(backend_ids).numpy().tolist() == expected


def test_detokenize_rejects_bad_ids(tokenizer):
    with pytest.raises(TypeError, match="float32"):
        tokenizer.detokenize(np.zeros((2, 3), "float32"))
    with pytest.raises(ValueError, match=r"ids.shape=\(1, 2, 3\)"):
        tokenizer.detokenize(np.zeros((1, 2, 3), "int32"))
    with pytest.raises(TypeError, match="strings"):
        tokenizer.tokenize(tf.constant([1, 2]))


def test_works_in_tf_function_and_tf_data(tokenizer):
    strings = ["A man in a blue shirt.", "Zwei Hunde spielen."]

    @tf.function(input_signature=[tf.TensorSpec([None], tf.string)])
    def round_trip(batch):
        ids = tokenizer.tokenize(batch)
        return ids.to_tensor(), tokenizer.detokenize(ids.to_tensor())

    ids, text = round_trip(tf.constant(strings))
    np.testing.assert_array_equal(ids, tokenizer.tokenize(strings).to_tensor())
    assert [t.decode() for t in text.numpy()] == strings

    dataset = tf.data.Dataset.from_tensor_slices(strings).map(tokenizer.tokenize)
    lengths = [len(x) for x in dataset]
    assert lengths == tokenizer.tokenize(strings).row_lengths().numpy().tolist()


def test_survives_set_random_seed(sentences):
    # `tf.random.set_seed` clears TensorFlow's eager kernel cache, which
    # deletes tf_text's kernel-private SentencePiece resource.
    tokenizer = SubwordTokenizer.train(sentences[:100], vocabulary_size=100)
    expected = tokenizer.tokenize(["A dog."]).to_tensor()
    tokenize = tf.function(lambda x: tokenizer.tokenize(x).to_tensor())
    tokenize(tf.constant(["A dog."]))
    keras.utils.set_random_seed(1)
    tf.random.set_seed(2)
    np.testing.assert_array_equal(tokenizer.tokenize(["A dog."]).to_tensor(), expected)
    np.testing.assert_array_equal(tokenize(tf.constant(["A dog."])), expected)
    assert tokenizer.detokenize(expected).numpy().tolist() == [b"A dog."]


def test_save_and_load_give_identical_ids(tokenizer, sentences, tmp_path):
    tokenizer.save(tmp_path / "tok")
    config = json.loads((tmp_path / "tok" / "tokenizer.json").read_text())
    assert config["vocabulary_size"] == VOCABULARY_SIZE
    assert config["model_type"] == "unigram"
    assert (tmp_path / "tok" / "tokenizer.model").read_bytes() == tokenizer.model_proto
    loaded = SubwordTokenizer.load(str(tmp_path / "tok"))
    assert loaded.model_proto == tokenizer.model_proto
    np.testing.assert_array_equal(
        loaded.tokenize(sentences).to_tensor(),
        tokenizer.tokenize(sentences).to_tensor(),
    )
    with pytest.raises(FileNotFoundError, match=r"tokenizer\.model' is missing"):
        SubwordTokenizer.load(tmp_path)
    config["vocabulary_size"] = 8000
    (tmp_path / "tok" / "tokenizer.json").write_text(json.dumps(config))
    with pytest.raises(ValueError, match="does not describe"):
        SubwordTokenizer.load(tmp_path / "tok")


def test_tracked_by_saved_model(tokenizer, tmp_path):
    module = tf.Module()
    module.tokenizer = tokenizer
    module.tokenize = tf.function(
        lambda x: tokenizer.tokenize(x).to_tensor(),
        input_signature=[tf.TensorSpec([None], tf.string)],
    )
    tf.saved_model.save(module, str(tmp_path / "saved"))
    restored = tf.saved_model.load(str(tmp_path / "saved"))
    strings = tf.constant(["A dog runs."])
    np.testing.assert_array_equal(
        restored.tokenize(strings), tokenizer.tokenize(strings).to_tensor()
    )


def test_training_is_reproducible_and_supports_bpe(sentences, tokenizer):
    again = SubwordTokenizer.train(sentences, vocabulary_size=VOCABULARY_SIZE)
    assert again.model_proto == tokenizer.model_proto
    bpe = SubwordTokenizer.train(sentences, vocabulary_size=200, model_type="bpe")
    assert bpe.get_config()["model_type"] == "bpe"
    assert bpe.detokenize(bpe.tokenize(["A dog."])).numpy().tolist() == [b"A dog."]


@pytest.mark.parametrize(
    "kwargs, error, match",
    [
        ({"vocabulary_size": 0}, ValueError, "vocabulary_size=0"),
        ({"vocabulary_size": 2.5}, TypeError, "vocabulary_size=2.5"),
        ({"vocabulary_size": True}, TypeError, "vocabulary_size=True"),
        ({"model_type": "wordpiece"}, ValueError, "model_type='wordpiece'"),
        ({"character_coverage": 0.0}, ValueError, "character_coverage=0.0"),
        ({"seed": -1}, ValueError, "seed=-1"),
        ({"vocabulary_size": 100000}, ValueError, "vocabulary_size=100000"),
    ],
)
def test_train_validates_arguments(sentences, kwargs, error, match):
    with pytest.raises(error, match=match):
        SubwordTokenizer.train(sentences[:50], **kwargs)


def test_train_rejects_bad_sentences():
    with pytest.raises(TypeError, match="single string"):
        SubwordTokenizer.train("A dog.")
    with pytest.raises(TypeError, match=r"sentences\[1\]=3"):
        SubwordTokenizer.train(["a", 3])
    with pytest.raises(ValueError, match="must not be empty"):
        SubwordTokenizer.train([])
    with pytest.raises(TypeError, match="model_proto"):
        SubwordTokenizer("not bytes")
