"""What a converted tokenizer does, as JSON, to compare two conversions (two transformers releases, say):
the special tokens' ids, the ids of 356 texts (350 chat-templated arith prompts, six with spaces, tabs, non-ASCII,
special tokens), their decoding with and without special tokens, and 300 random token sequences decoded
(docs/smollm2.md, "The model").

    .venv/bin/python scripts/tokenizer_probe.py DIR > a.json    # DIR: a converted model folder
    PYTHONPATH=/other/transformers .venv/bin/python scripts/tokenizer_probe.py DIR2 > b.json
    cmp a.json b.json                                          # the same bytes: the same behaviour on these
"""

from __future__ import annotations

import argparse
import json
import random

from transformers import AutoTokenizer

from bandpo_lab.tasks.arith import ArithConfig, make_arith_splits

EXTRA_TEXTS = [
    "  leading spaces",
    "tabs\tand\nnewlines\r\n",
    "unicode: é ü ß 漢字 🙂 ▁x",
    "<|im_end|>x<|endoftext|>",
    "The answer is 42.",
    "-7 * 8 = -56",
]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("model_dir", help="a converted model folder (its tokenizer files)")
    args = parser.parse_args()
    tok = AutoTokenizer.from_pretrained(args.model_dir)
    train, test = make_arith_splits(ArithConfig(digits=[1, 2], n_train=300, n_test=50))
    texts = [
        tok.apply_chat_template(r["prompt"], tokenize=False, add_generation_prompt=True) for r in train + test
    ]
    texts += EXTRA_TEXTS
    ids = [tok(t)["input_ids"] for t in texts]
    rng = random.Random(0)
    sequences = [[rng.randrange(len(tok)) for _ in range(40)] for _ in range(300)]
    out = {
        "special": {
            "bos": tok.bos_token_id,
            "eos": tok.eos_token_id,
            "pad": tok.pad_token_id,
            "unk": tok.unk_token_id,
        },
        "vocabulary": len(tok),
        "n_texts": len(texts),
        "n_tokens": sum(map(len, ids)),
        "ids": ids,
        "decoded": [tok.decode(i) for i in ids],
        "decoded_skip_special": [tok.decode(i, skip_special_tokens=True) for i in ids],
        "random_decoded": [tok.decode(s) for s in sequences],
    }
    print(json.dumps(out, ensure_ascii=False))


if __name__ == "__main__":
    main()
