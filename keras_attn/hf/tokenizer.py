"""A checkpoint's tokenizer, with its special-token conventions.

`HFTokenizer.from_directory` reads, in this order:

- `tokenizer.json` (Qwen2, Llama 3, and Llama 2 / Mistral repositories,
  which ship one beside `tokenizer.model`), run by the `tokenizers`
  library: the file is that library's own serialization, so its
  normalizer, pre-tokenizer (byte-level BPE included), added tokens and
  post-processor (the BOS a checkpoint adds, or not) are the ones
  `transformers` runs, with no re-implementation to drift;
- else `tokenizer.model` (a SentencePiece model: Llama 2, Mistral) or
  `spiece.model` (T5's), run by `sentencepiece`, with the BOS/EOS that
  `tokenizer_config.json` declares (`add_bos_token`, default on;
  `add_eos_token`, default off, on for a `T5Tokenizer`, which ends every
  sequence with `</s>`). Ids past the SentencePiece model's pieces (T5's
  sentinels `<extra_id_*>`, which `transformers` adds) are special tokens:
  decoding skips them.

Our `keras_attn.text.SubwordTokenizer` is not used: it fixes the special
ids (pad 0, unk 1, start 2, end 3) for the models trained here, and a
checkpoint's are its own (Llama 2: unk 0, bos 1, eos 2, no pad).
"""

import json
from pathlib import Path

TOKENIZER_JSON = "tokenizer.json"
# SentencePiece model files, in the order they are looked for.
SENTENCEPIECE_MODELS = ("tokenizer.model", "spiece.model")
TOKENIZER_CONFIG = "tokenizer_config.json"


def _token_text(token):
    """A special token of `tokenizer_config.json`: a string or an AddedToken dict."""
    if isinstance(token, dict):
        return token.get("content")
    return token


class HFTokenizer:
    """Text to ids and back as a Hugging Face checkpoint's tokenizer does it.

    Args:
        encoder: a `tokenizers.Tokenizer` or a
            `sentencepiece.SentencePieceProcessor`.
        start_id: the BOS id, or `None` where the checkpoint has none.
        end_id: the EOS id, or `None`.
        add_start: bool, whether `encode` adds the BOS (SentencePiece only:
            a `tokenizer.json` says so in its own post-processor).
        add_end: bool, whether `encode` adds the EOS (SentencePiece only).

    Example:

    >>> tokenizer = HFTokenizer.from_directory("./my_checkpoint")  # doctest: +SKIP
    >>> tokenizer.encode(["Hello"])  # doctest: +SKIP
    [[1, 15043]]
    """

    def __init__(
        self, encoder, start_id=None, end_id=None, add_start=False, add_end=False
    ):
        self.encoder = encoder
        self.start_id = start_id
        self.end_id = end_id
        self.add_start = bool(add_start)
        self.add_end = bool(add_end)
        self.is_sentencepiece = not hasattr(encoder, "encode_batch")

    @classmethod
    def from_directory(cls, directory):
        """The tokenizer of a checkpoint directory (see the module docstring).

        Raises:
            FileNotFoundError: no `tokenizer.json`, `tokenizer.model` or
                `spiece.model`.
        """
        directory = Path(directory)
        settings = {}
        if (directory / TOKENIZER_CONFIG).is_file():
            settings = json.loads((directory / TOKENIZER_CONFIG).read_text("utf-8"))
        if (directory / TOKENIZER_JSON).is_file():
            import tokenizers

            encoder = tokenizers.Tokenizer.from_file(str(directory / TOKENIZER_JSON))
            ids = encoder.token_to_id
        elif any((directory / name).is_file() for name in SENTENCEPIECE_MODELS):
            import sentencepiece

            model_file = next(
                directory / name
                for name in SENTENCEPIECE_MODELS
                if (directory / name).is_file()
            )
            encoder = sentencepiece.SentencePieceProcessor(model_file=str(model_file))
            ids = encoder.piece_to_id
            # The model's own ids where tokenizer_config.json names none.
            for key, index in (
                ("bos_token", encoder.bos_id()),
                ("eos_token", encoder.eos_id()),
            ):
                if key not in settings and index >= 0:
                    settings[key] = encoder.id_to_piece(index)
        else:
            raise FileNotFoundError(
                f"The checkpoint {str(directory)!r} has no {TOKENIZER_JSON!r} and "
                f"no SentencePiece model ({' or '.join(SENTENCEPIECE_MODELS)})."
            )
        start = _token_text(settings.get("bos_token"))
        end = _token_text(settings.get("eos_token"))
        return cls(
            encoder,
            start_id=ids(start) if start else None,
            end_id=ids(end) if end else None,
            add_start=settings.get("add_bos_token", True),
            add_end=settings.get(
                "add_eos_token", settings.get("tokenizer_class") == "T5Tokenizer"
            ),
        )

    def piece(self, index):
        """The token (piece) of an id, e.g. `"<s>"`."""
        if self.is_sentencepiece:
            return self.encoder.id_to_piece(int(index))
        return self.encoder.id_to_token(int(index))

    @property
    def vocabulary_size(self):
        """The number of ids, added tokens included."""
        if self.is_sentencepiece:
            return self.encoder.get_piece_size()
        return self.encoder.get_vocab_size(with_added_tokens=True)

    def encode(self, texts, add_special_tokens=True):
        """A list of id lists, with the checkpoint's BOS/EOS where it adds them."""
        texts = list(texts)
        if not self.is_sentencepiece:
            encodings = self.encoder.encode_batch(
                texts, add_special_tokens=add_special_tokens
            )
            return [encoding.ids for encoding in encodings]
        rows = self.encoder.encode(texts)
        if not add_special_tokens:
            return rows
        start = [self.start_id] if self.add_start and self.start_id is not None else []
        end = [self.end_id] if self.add_end and self.end_id is not None else []
        return [start + row + end for row in rows]

    def tokenize(self, texts):
        """`encode` without special tokens."""
        return self.encode(texts, add_special_tokens=False)

    def decode(self, ids, skip_special_tokens=True):
        """A list of strings, one per id list; special tokens skipped."""
        rows = [[int(index) for index in row] for row in ids]
        if self.is_sentencepiece:
            special = {self.start_id, self.end_id} if skip_special_tokens else set()
            size = self.encoder.get_piece_size()  # past it: T5's sentinels
            return self.encoder.decode(
                [[i for i in row if i not in special and i < size] for row in rows]
            )
        return self.encoder.decode_batch(rows, skip_special_tokens=skip_special_tokens)
