#!/usr/bin/env python3
"""run10 prompts: run5's prompt_long.txt (6,085 tokens in this model's vocabulary, 26,007 characters) cut at a word
boundary to about TARGET tokens (by that characters-per-token ratio); llama-server logs the real count."""

import sys
from pathlib import Path

src, outdir = Path(sys.argv[1]), Path(sys.argv[2])
text = src.read_text().strip()
chars_per_token = len(text) / 6085
for target in map(int, sys.argv[3:]):
    body = text[: int(target * chars_per_token)]
    body = body[: body.rfind(" ")]
    (outdir / f"prompt_{target}.txt").write_text(body)
    print(target, len(body))
