"""The scenario's context: the -c that holds every stream at the depth decoding reads, and one refusal otherwise."""

from __future__ import annotations

import pytest

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_CTX
from moe_model.speed.scenario import Scenario, context_for_depth


def test_the_context_is_raised_to_hold_every_stream_at_the_depth_and_kept_where_it_does():
    assert context_for_depth(4096, 512, 1) == 4096  # llama.cpp allocates -c cells: a shallower depth keeps it
    assert context_for_depth(4096, 8192, 1) == 8192 and context_for_depth(4096, 8192, 2) == 16384
    assert context_for_depth(4096, MAX_CTX, 4) == MAX_CTX  # never beyond what the library accepts


def test_streams_that_do_not_fit_the_context_at_the_depth_are_refused_in_one_line():
    assert Scenario(n_ctx=8192, concurrency=4, depth=2048).context_depth == 2048  # 4 x 2,048 cells: exactly -c
    with pytest.raises(MoeModelError, match=r"x 4 stream\(s\)\) does not fit the context .* raise --ctx to 16,000"):
        Scenario(n_ctx=8192, concurrency=4, depth=4000)  # each stream's KV is its own: 16,000 cells, not 8,192
    raised = context_for_depth(8192, 4000, 4)
    assert Scenario(n_ctx=raised, concurrency=4, depth=4000).n_ctx == raised == 16000
