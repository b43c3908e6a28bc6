"""llama-server's prompt calls: n_batch tokens at most, and for checkpointed models a cut 4 + n_ubatch and 4 tokens
before the end (tools/server/server-context.cpp, update_slots)."""

from __future__ import annotations

from moe_model.record.server_batches import prompt_calls


def test_a_prompt_fills_calls_of_n_batch_tokens():
    assert prompt_calls(5000, 2048, 512, checkpoints=False) == [(0, 2048), (2048, 4096), (4096, 5000)]


def test_a_checkpointed_prompt_ends_with_calls_of_n_ubatch_and_4_tokens():
    assert prompt_calls(600, 2048, 512, checkpoints=True) == [(0, 84), (84, 596), (596, 600)]
    assert prompt_calls(100, 2048, 512, checkpoints=True) == [(0, 96), (96, 100)]


def test_the_cuts_never_exceed_n_batch_and_a_short_prompt_is_one_call():
    assert prompt_calls(60, 16, 8, checkpoints=True) == [(0, 16), (16, 32), (32, 48), (48, 56), (56, 60)]
    assert prompt_calls(3, 2048, 512, checkpoints=True) == [(0, 3)]
