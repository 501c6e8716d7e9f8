"""Published shapes: parameter counts of BERT-base, GPT-2 small and ViT-B/16.

The models are built inside `keras.StatelessScope(initialize_variables=
False)`: every variable gets its shape but no values, so counting 320
million parameters costs no memory and no random-number generation.

Expected counts are worked out from the architecture, term by term, and
compared exactly; each is also compared with the count its paper (or the
reference code) publishes:

- BERT-base, 109,482,240 (Devlin et al., 2019, "110M"): embeddings for
  30,522 tokens, 512 positions and 2 token types, an embedding layer norm,
  12 layers, and a tanh "pooler" `Dense(768)` on the `[CLS]` token. Ours has
  no token types (1,536 parameters: the classifier takes one segment) and
  no pooler (590,592: the head reads the `[CLS]` features directly), and
  adds a `Dense(num_classes)` head. Ours is 0.54 % smaller: the test allows
  1 %.
- GPT-2 small, 124,439,808 (Radford et al., 2019, "124M" in the released
  code): the same terms as ours, so equal.
- ViT-B/16, 86,567,656 (Dosovitskiy et al., 2021, "86M"): the same terms
  as ours with a 1,000-class head, so equal.
"""

import keras
import pytest

from keras_attn.models import (
    ENCODER_CLASSIFIER_PRESETS,
    LM_PRESETS,
    VIT_PRESETS,
    TransformerEncoderClassifier,
    TransformerLM,
    VisionTransformer,
)


def count_without_values(build):
    with keras.StatelessScope(initialize_variables=False):
        count = build().count_params()
    # Drop the uninitialized variables Keras still holds, so that no later
    # stateless scope initializes 100 million parameters. They hold no
    # values, so no garbage collection (seconds each in a test process
    # that has loaded three frameworks and built hundreds of models).
    keras.utils.clear_session(free_memory=False)
    return count


def encoder_layer(hidden, intermediate):
    attention = 4 * (hidden * hidden + hidden)  # query, key, value, output
    feed_forward = hidden * intermediate + intermediate + intermediate * hidden + hidden
    layer_norms = 2 * 2 * hidden
    return attention + feed_forward + layer_norms


def test_bert_base():
    num_classes = 2
    ours = count_without_values(
        lambda: TransformerEncoderClassifier.from_preset(
            "bert_base", num_classes=num_classes
        )
    )
    embeddings = 30522 * 768 + 512 * 768 + 2 * 768  # tokens, positions, norm
    head = 768 * num_classes + num_classes
    assert ours == embeddings + 12 * encoder_layer(768, 3072) + head
    published = 109_482_240
    token_types, pooler = 2 * 768, 768 * 768 + 768
    assert ours - head == published - token_types - pooler
    assert abs(ours - published) / published < 0.01


def test_gpt2_small():
    ours = count_without_values(lambda: TransformerLM.from_preset("gpt2_small"))
    embeddings = 50257 * 768 + 1024 * 768  # tied output projection: no more
    final_norm = 2 * 768
    assert ours == embeddings + 12 * encoder_layer(768, 3072) + final_norm
    assert ours == 124_439_808


def test_vit_base_patch16_224():
    ours = count_without_values(
        lambda: VisionTransformer.from_preset("vit_base_patch16_224")
    )
    patch_embedding = 16 * 16 * 3 * 768 + 768
    class_token_and_positions = 768 + (14 * 14 + 1) * 768
    final_norm_and_head = 2 * 768 + 768 * 1000 + 1000
    assert ours == (
        patch_embedding
        + class_token_and_positions
        + 12 * encoder_layer(768, 3072)
        + final_norm_and_head
    )
    assert ours == 86_567_656


@pytest.mark.parametrize(
    "cls, presets, arguments",
    [
        (TransformerEncoderClassifier, ENCODER_CLASSIFIER_PRESETS, {"num_classes": 3}),
        (TransformerLM, LM_PRESETS, {}),
        (VisionTransformer, VIT_PRESETS, {"num_classes": 3}),
    ],
)
def test_every_other_preset_builds(cls, presets, arguments):
    published = ("bert_base", "gpt2_small", "vit_base_patch16_224")
    for name in sorted(set(presets) - set(published)):
        given = dict(arguments)
        if cls is not VisionTransformer and "vocabulary_size" not in presets[name]:
            given["vocabulary_size"] = 100
        count = count_without_values(
            lambda name=name, given=given: cls.from_preset(name, **given)
        )
        assert count > 0, name
