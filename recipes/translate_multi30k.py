"""Train, evaluate and use an English-to-German Transformer on Multi30k.

A thin wrapper over `keras_attn_recipes.translate_multi30k` (installed as
the console script `keras-attn-translate`), so that a checkout runs the
same command line: `python recipes/translate_multi30k.py --help`.
"""

import sys
import time
from pathlib import Path

# The checkout's packages, ahead of any installed copy.
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from keras_attn_recipes.translate_multi30k import (  # noqa: E402
    TranslationConfig,
    main,
    parse_args,
)

if __name__ == "__main__":
    start = time.time()
    main()
    print(f"Done in {time.time() - start:.0f} s.", file=sys.stderr)


__all__ = ["TranslationConfig", "main", "parse_args"]
