"""How llama-server cuts a prompt into llama_decode calls, in one place.

tools/server/server-context.cpp (llama.cpp 0c1e57098, the copy llama-cpp-python 0.3.36 vendors), update_slots:
a slot's prompt tokens fill the batch up to n_batch; for a model whose memory cannot be rolled back freely (a
sliding window, as gpt-oss; recurrent or hybrid layers) the server keeps context checkpoints (n_ctx_checkpoints,
32 by default) and also ends a batch when 4 + n_ubatch, then 4, prompt tokens are left (PR #20288), so that a
checkpoint can be made that close to the end. Only the prompt's last token computes logits.
"""

from __future__ import annotations

CHECKPOINT_TAIL = 4  # tokens the server leaves for the last call of a checkpointed prompt (and 4 + n_ubatch before)


def prompt_calls(n_tokens: int, n_batch: int, n_ubatch: int, checkpoints: bool) -> list[tuple[int, int]]:
    """The [start, end) token spans of each llama_decode call that serves an n_tokens prompt."""
    breaks = {min(n_batch, CHECKPOINT_TAIL + n_ubatch), min(n_batch, CHECKPOINT_TAIL)} if checkpoints else set()
    calls, start = [], 0
    while start < n_tokens:
        end = start
        while end < n_tokens and end - start < n_batch:
            end += 1
            if n_tokens - end in breaks:
                break
        calls.append((start, end))
        start = end
    return calls
