"""Prompts from a text file of paragraphs or a chat-style JSONL file; anything else is one line."""

from __future__ import annotations

import json

import pytest

from moe_model.record.prompts import Prompt, read_prompts
from moe_model.record.runtime import RecordError


def test_a_text_file_holds_one_prompt_a_paragraph(tmp_path):
    path = tmp_path / "p.txt"
    path.write_text("first line\nsame prompt\n\n  \n\nsecond\n\n\n")
    assert read_prompts(path) == (Prompt(text="first line\nsame prompt"), Prompt(text="second"))


def test_a_jsonl_file_holds_prompts_or_chats_one_a_line(tmp_path):
    path = tmp_path / "p.jsonl"
    chat = {"messages": [{"role": "system", "content": "be brief"}, {"role": "user", "content": "hi"}]}
    path.write_text(json.dumps({"prompt": "complete this"}) + "\n\n" + json.dumps(chat) + "\n")
    assert read_prompts(path) == (
        Prompt(text="complete this"),
        Prompt(messages=(("system", "be brief"), ("user", "hi"))),
    )


@pytest.mark.parametrize(
    ("name", "text", "says"),
    [
        ("p.txt", "\n \n", "holds no prompt"),
        ("p.jsonl", "not json\n", "line 1 is not JSON"),
        ("p.jsonl", '{"prompt": ""}\n', 'neither "prompt"'),
        ("p.jsonl", '{"messages": [{"role": "user"}]}\n', 'neither "prompt"'),
    ],
)
def test_a_file_without_usable_prompts_is_one_line(tmp_path, name, text, says):
    path = tmp_path / name
    path.write_text(text)
    with pytest.raises(RecordError, match=says):
        read_prompts(path)


def test_a_file_that_is_not_utf8_is_one_line(tmp_path):
    path = tmp_path / "p.txt"
    path.write_bytes(b"\xff\xfe\x00bad")
    with pytest.raises(RecordError, match="not UTF-8"):
        read_prompts(path)
