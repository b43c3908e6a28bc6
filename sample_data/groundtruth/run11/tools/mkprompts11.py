#!/usr/bin/env python3
"""run11 prompts: consecutive pieces of run5's prompt_long.txt (6,085 tokens in run3's vocabulary, 26,007 characters),
each cut at a sentence end near TARGET tokens (by that characters-per-token ratio), one paragraph each, written to
OUT separated by blank lines. The server client and the CPU recording read the same file."""

import sys
from pathlib import Path

src, out = Path(sys.argv[1]), Path(sys.argv[2])
text = src.read_text().strip()
chars_per_token = len(text) / 6085
paragraphs, start = [], 0
for target in map(int, sys.argv[3:]):
    end = text.find(". ", start + int(target * chars_per_token)) + 1
    paragraphs.append(text[start:end].strip())
    start = end + 1
out.write_text("\n\n".join(paragraphs) + "\n")
print(len(paragraphs), "paragraphs,", [len(p) for p in paragraphs], "characters")
