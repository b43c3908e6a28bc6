"""The prompts a recording serves: a text file of paragraphs (blank-line separated, one prompt each) or a chat-style
JSONL file (one JSON object a line, with "prompt": text or "messages": [{"role", "content"}, ...])."""

from __future__ import annotations

import json
import re
from dataclasses import dataclass
from pathlib import Path

from moe_model.limits import MAX_RECORD_PROMPT_BYTES, MAX_RECORD_PROMPTS, check_at_most, shown
from moe_model.readers.files import open_regular
from moe_model.record.runtime import RecordError


@dataclass(frozen=True)
class Prompt:
    """One request: a completion prompt (text) or a chat (messages as (role, content) pairs)."""

    text: str | None = None
    messages: tuple[tuple[str, str], ...] = ()


def read_prompts(path: str | Path) -> tuple[Prompt, ...]:
    """Every prompt of the file, in order; an empty file, or a JSONL line without a prompt, is one line."""
    with open_regular(path, "prompts file", RecordError) as f:
        raw = f.read(MAX_RECORD_PROMPT_BYTES + 1)
    check_at_most(len(raw), MAX_RECORD_PROMPT_BYTES, "bytes of prompts", RecordError)
    try:
        text = raw.decode("utf-8")
    except UnicodeDecodeError:
        raise RecordError(f"the prompts file {shown(str(path))} is not UTF-8 text") from None
    prompts = _jsonl(text) if str(path).lower().endswith(".jsonl") else _paragraphs(text)
    if not prompts:
        raise RecordError(f"the prompts file {shown(str(path))} holds no prompt")
    check_at_most(len(prompts), MAX_RECORD_PROMPTS, "prompts", RecordError)
    return prompts


def _paragraphs(text: str) -> tuple[Prompt, ...]:
    return tuple(Prompt(text=p.strip()) for p in re.split(r"\n\s*\n", text) if p.strip())


def _jsonl(text: str) -> tuple[Prompt, ...]:
    return tuple(_json_prompt(line, n) for n, line in enumerate(text.splitlines(), 1) if line.strip())


def _json_prompt(line: str, line_no: int) -> Prompt:
    try:
        item = json.loads(line)
    except ValueError:
        raise RecordError(f"prompts line {line_no} is not JSON") from None
    if isinstance(item, dict) and isinstance(item.get("prompt"), str) and item["prompt"].strip():
        return Prompt(text=item["prompt"])
    messages = item.get("messages") if isinstance(item, dict) else None
    if isinstance(messages, list) and messages and all(_is_message(m) for m in messages):
        return Prompt(messages=tuple((m["role"], m["content"]) for m in messages))
    raise RecordError(f'prompts line {line_no} has neither "prompt" (text) nor "messages" (role and content each)')


def _is_message(item: object) -> bool:
    return isinstance(item, dict) and isinstance(item.get("role"), str) and isinstance(item.get("content"), str)
