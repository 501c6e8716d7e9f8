"""Llama, Mistral and Qwen2 checkpoints on `TransformerLM`, against `transformers`.

One test per family loads the tiny checkpoint of `conftest.py` and checks,
on one built model: the logits equal `transformers`' (float32, 1e-4), 20
greedy tokens equal `generate(do_sample=False, num_beams=1)`, and the
export back loads in `transformers` with the same logits. One more does
it for a Qwen2 checkpoint whose `head_dim` is not `hidden_size /
num_attention_heads` (6 heads of 8 in 32, as Mistral-Nemo's and Qwen3's
heads are of their own size).
"""

import json

import keras
import numpy as np
import pytest

torch = pytest.importorskip("torch")
transformers = pytest.importorskip("transformers")

import keras_attn  # noqa: E402
from keras_attn.generation import generate_lm  # noqa: E402
from keras_attn.hf import llama  # noqa: E402
from keras_attn.layers.positions import position_schemes  # noqa: E402
from keras_attn.models import TransformerLM  # noqa: E402
from keras_attn.text import TextGenerator  # noqa: E402

# Ids 3 ... 89: no special id, and not the pad id (95, the last id).
TOKENS = np.random.default_rng(0).integers(3, 90, size=(2, 11)).astype("int32")
PROMPT = TOKENS[:1, :9]  # longer than Mistral's window of 6
NEW_TOKENS = 20


def reference_logits(hf_model, tokens):
    with torch.no_grad():
        return hf_model(torch.tensor(tokens, dtype=torch.long)).logits.numpy()


@pytest.mark.parametrize("model_type", ["llama", "mistral", "qwen2"])
def test_logits_greedy_and_export_equal_transformers(
    hf_causal_lms, model_type, tmp_path
):
    directory, hf_model = hf_causal_lms(model_type)
    check_logits_greedy_and_export(directory, hf_model, model_type, tmp_path)


def check_logits_greedy_and_export(directory, hf_model, model_type, tmp_path):
    """The loaded model's logits and greedy tokens equal `hf_model`'s, and
    its export loads in `transformers` with the same logits; returns the
    model and the exported config."""
    model = TransformerLM.from_preset(str(directory))

    expected = reference_logits(hf_model, TOKENS)
    logits = keras.ops.convert_to_numpy(model(TOKENS))
    # The check can fail: the logits are of order one, not of the tolerance.
    assert np.abs(expected).max() > 0.5
    np.testing.assert_allclose(logits, expected, atol=1e-4, rtol=0)

    with torch.no_grad():
        hf_tokens = hf_model.generate(
            torch.tensor(PROMPT, dtype=torch.long),
            do_sample=False,
            num_beams=1,
            max_new_tokens=NEW_TOKENS,
            # No id ends the sequence: all 20 steps run (transformers warns
            # that -1 is not a token, which is the point).
            eos_token_id=-1,
        ).numpy()
    # Our generator never writes the pad id: the reference must not either.
    assert model.pad_id not in hf_tokens[0, PROMPT.shape[1] :]
    ours = generate_lm(model, PROMPT, max_length=PROMPT.shape[1] + NEW_TOKENS)
    np.testing.assert_array_equal(keras.ops.convert_to_numpy(ours["tokens"]), hf_tokens)

    exported = llama.export(model, tmp_path / "export", model_type=model_type)
    config = json.loads((exported / "config.json").read_text())
    assert config["model_type"] == model_type
    reloaded = transformers.AutoModelForCausalLM.from_pretrained(
        exported, attn_implementation="eager"
    ).eval()
    np.testing.assert_allclose(
        reference_logits(reloaded, TOKENS), logits, atol=1e-4, rtol=0
    )
    return model, config


def test_a_head_dim_of_its_own_equals_transformers(hf_causal_lms, tmp_path):
    """Qwen2 (q/k/v biases of `heads * head_dim`) with 6 query heads and 2
    key/value heads of 8 features in a model dimension of 32, which 6 does
    not divide: loaded, decoded with the cache and exported."""
    directory, hf_model = hf_causal_lms(
        "qwen2", num_attention_heads=6, num_key_value_heads=2, head_dim=8
    )
    model, config = check_logits_greedy_and_export(
        directory, hf_model, "qwen2", tmp_path
    )
    assert model.attention.head_dim == 8 and model.num_heads == 6
    assert model.position_scheme.head_dim == 8
    block = model.get_layer("decoder_block_0")
    assert block.head_dim == 8
    # (hidden, heads, head_dim) and (heads, head_dim, hidden)
    assert tuple(block.self_attention.query_dense.kernel.shape) == (32, 6, 8)
    assert tuple(block.self_attention.key_dense.kernel.shape) == (32, 2, 8)
    assert tuple(block.self_attention.output_dense.kernel.shape) == (6, 8, 32)
    assert config["head_dim"] == 8


def test_unmappable_fields_are_refused_by_name():
    base = {
        "model_type": "llama",
        "vocab_size": 96,
        "hidden_size": 32,
        "intermediate_size": 48,
        "num_hidden_layers": 2,
        "num_attention_heads": 4,
    }
    cases = [
        ({"hidden_act": "gelu"}, "hidden_act='gelu'"),
        (
            {"rope_parameters": {"rope_type": "yarn", "factor": 4.0}},
            "rope_scaling.rope_type='yarn'",
        ),
        ({"rope_scaling": {"rope_type": "llama3", "factor": 8.0}}, "'llama3'"),
        ({"head_dim": 0}, "head_dim=0"),
        ({"head_dim": "16"}, "head_dim='16'"),
        (
            {
                "model_type": "qwen2",
                "use_sliding_window": True,
                "sliding_window": 4,
                "max_window_layers": 1,
            },
            "max_window_layers=1",
        ),
    ]
    for changes, named in cases:
        with pytest.raises(ValueError, match="cannot be loaded exactly") as error:
            llama.model_arguments({**base, **changes})
        assert named in str(error.value), (changes, str(error.value))

    # A `head_dim` of its own is the heads' size; hidden / heads, nothing.
    assert llama.model_arguments({**base, "head_dim": 16})["attention"] == {
        "num_key_value_heads": 4,
        "dropout": 0.0,
        "head_dim": 16,
    }
    assert "head_dim" not in llama.model_arguments({**base, "head_dim": 8})["attention"]

    # The rotation reaches the model as the position scheme's own fields.
    assert llama.model_arguments({**base, "rope_theta": 5e5})["position"] == {
        "name": "rotary",
        "max_wavelength": 5e5,
        "scaling_factor": 1.0,
    }
    with pytest.raises(ValueError, match="takes the fields"):
        position_schemes.check_position({"name": "rotary", "num_heads": 4})


def until_end(ids, start, end_id=2):
    """`ids[start:]` up to and including the first end id."""
    ids = list(ids)
    return ids[: ids.index(end_id, start) + 1] if end_id in ids[start:] else ids


def test_text_generator_from_checkpoint_equals_transformers(hf_causal_lms, tmp_path):
    prompts = ["the cat sat", "a good dog ran in"]
    # Llama's tokenizer adds <s>; Qwen2's adds no start token.
    for model_type, starts in (("qwen2", False), ("llama", True)):
        directory, hf_model = hf_causal_lms(model_type)
        generator = TextGenerator.from_preset(str(directory), length_multiple=4)
        assert generator.add_start is starts
        hf_tokenizer = transformers.AutoTokenizer.from_pretrained(directory)
        outputs, _ = generator.generate_ids(prompts, max_length=8 + NEW_TOKENS)
        for prompt, ours in zip(prompts, outputs):
            pieces = generator.tokenizer.tokenize([prompt]).to_list()[0]
            ids = [1, *pieces] if starts else pieces  # <s> where it is added
            if starts:
                # (transformers reads the tiny Qwen2 tokenizer.json as a
                # byte-level Qwen2Tokenizer: tests/hf/test_hf_tokenizer.py
                # checks our ids on tokenizers of that kind.)
                assert ids == hf_tokenizer(prompt)["input_ids"]
            with torch.no_grad():
                theirs = hf_model.generate(
                    torch.tensor([ids]),
                    do_sample=False,
                    num_beams=1,
                    max_new_tokens=8 + NEW_TOKENS - len(ids),
                )[0].tolist()
            assert until_end(ours, len(ids)) == until_end(theirs, len(ids))
    with pytest.raises(ValueError, match=r"prompts\[1\]=''"):
        TextGenerator.from_preset(str(hf_causal_lms("qwen2")[0])).generate(["a", ""])
    assert generator.generate(["the cat sat"], max_length=5)[0].startswith(
        "the cat sat"
    )

    # Exported with its tokenizer: transformers reads the same ids.
    exported = keras_attn.hf.export_to_transformers(
        generator.model, generator.tokenizer, tmp_path / "export"
    )
    reloaded = transformers.AutoTokenizer.from_pretrained(exported)
    assert reloaded(prompts)["input_ids"] == hf_tokenizer(prompts)["input_ids"]


def test_attention_a_llama_lacks_is_not_exported(tmp_path):
    model = TransformerLM(
        **{
            **llama.model_arguments(
                {
                    "model_type": "llama",
                    "vocab_size": 20,
                    "hidden_size": 8,
                    "num_hidden_layers": 1,
                    "num_attention_heads": 2,
                    "intermediate_size": 16,
                }
            ),
            "attention": {"scale": 1.0},  # T5's unscaled scores
        }
    )
    with pytest.raises(ValueError, match=r"attention\.scale=None"):
        keras_attn.hf.export_to_transformers(model, None, tmp_path)
