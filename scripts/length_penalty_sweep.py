"""BLEU and brevity of a trained translation run at several length penalties.

    python scripts/length_penalty_sweep.py runs/full val 0.6 1.0 1.5 2.0
    python scripts/length_penalty_sweep.py runs/full test_2016_flickr 0.6 1.5 \
        --beam-size 5 --average-last 10

Loads the run of `recipes/translate_multi30k.py` in the given directory (the
mean of its last `--average-last` epoch checkpoints, the setting's number by
default), translates the split with beam search at each length penalty
alpha, and prints cased and lowercased BLEU (`keras_attn.text.corpus_bleu`)
with sacreBLEU's brevity penalty and length ratio: whether the translations
are too short, and how much a longer penalty buys back. Choose alpha on
`val`, report it on the test set.
"""

import argparse
import os

os.environ.setdefault("KERAS_BACKEND", "jax")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "2")

import sacrebleu  # noqa: E402

from keras_attn.text import Translator, corpus_bleu, load_multi30k  # noqa: E402
from keras_attn_recipes.translation_steps import (  # noqa: E402
    load_translator,
    translate_with_progress,
)


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run_dir", help="Output directory of a trained run.")
    parser.add_argument("split", help="val or test_2016_flickr.")
    parser.add_argument("alphas", nargs="+", type=float, help="Length penalties.")
    parser.add_argument("--beam-size", type=int, default=None)
    parser.add_argument("--average-last", type=int, default=None)
    return parser.parse_args(argv)


def main(argv=None):
    args = parse_args(argv)
    base, config = load_translator(args.run_dir, "beam", args.average_last)
    beam_size = args.beam_size or config.beam_size
    sources, references = load_multi30k(args.split)
    for alpha in args.alphas:
        translator = Translator(
            base.model, base.tokenizer, beam_size=beam_size, length_penalty_alpha=alpha
        )
        hypotheses = translate_with_progress(translator, sources)
        report = corpus_bleu(hypotheses, references)
        brevity = sacrebleu.corpus_bleu(hypotheses, [references], lowercase=True)
        print(
            f"{args.split}, beam {beam_size}, alpha {alpha}: cased BLEU "
            f"{report.bleu:.2f}, lowercased {report.lowercase_bleu:.2f}, "
            f"chrF {report.chrf:.2f}, brevity penalty {brevity.bp:.3f}, "
            f"length ratio {brevity.sys_len / brevity.ref_len:.3f}",
            flush=True,
        )


if __name__ == "__main__":
    main()
