"""The numbers a llama.cpp log gives, each bounded before it is used: an integer like the flag or header field it
mirrors, a decimal at most MAX_LOG_AMOUNT; anything else is one line (LogError)."""

from __future__ import annotations

import math

from moe_model.errors import LogError
from moe_model.limits import (
    MAX_CONCURRENCY,
    MAX_CTX,
    MAX_EMBEDDING,
    MAX_EXPERTS,
    MAX_EXPERTS_USED,
    MAX_FEED_FORWARD,
    MAX_LAYERS,
    MAX_LOG_AMOUNT,
    MAX_LOG_COUNT,
    MAX_UBATCH,
    MAX_VRAM_GIB,
    check_at_most,
    shown,
)

# each integer a log gives, bounded like the flag or header field it mirrors (MAX_LOG_COUNT for the others)
_INT_LIMITS = {
    "n_layer": MAX_LAYERS,
    "n_expert": MAX_EXPERTS,
    "n_expert_used": MAX_EXPERTS_USED,
    "n_ff_exp": MAX_FEED_FORWARD,
    "n_embd": MAX_EMBEDDING,
    "offloaded_layers": MAX_LAYERS + 1,  # the output layer counts as one
    "total_layers": MAX_LAYERS + 1,
    "n_seq_max": MAX_CONCURRENCY,
    "n_ctx": MAX_CTX,
    "n_batch": MAX_CTX,
    "n_ubatch": MAX_UBATCH,
    "gpu_vram_mib": MAX_VRAM_GIB * 1024,
    "cache group layers": MAX_LAYERS,
    "cache group slots": MAX_LAYERS * MAX_EXPERTS,
    "slot id": MAX_CONCURRENCY,
}


def log_int(text: str, name: str) -> int:
    """An integer the log gives, refused in one line beyond the bound of what it names (its digits counted
    first: int() of thousands of digits is slow, and refused by Python beyond 4,300)."""
    most = _INT_LIMITS.get(name, MAX_LOG_COUNT)
    digits = len(text.lstrip("-"))
    if digits > len(str(MAX_LOG_COUNT)):
        raise LogError(f"the log's {name} has {digits:,} digits, above this tool's limit of {most:,}")
    check_at_most(abs(int(text)), most, f"the log's {name}", LogError)
    return int(text)


def log_float(text: str, name: str) -> float:
    """A decimal the log gives (MiB, ms, a share), refused in one line when it is no number (`[\\d.]+` matches
    1.2.3) or beyond MAX_LOG_AMOUNT (401 digits were read as inf and shown as `uploaded inf MiB`)."""
    try:
        value = float(text) if len(text) <= _FLOAT_CHARS else math.inf
    except ValueError:
        raise LogError(f"the log's {name} is {shown(text, 40)}: not a number") from None
    if value > MAX_LOG_AMOUNT:
        raise LogError(f"the log's {name} is {shown(text, 40)}, above this tool's limit of {MAX_LOG_AMOUNT:,.0f}")
    return value


_FLOAT_CHARS = 32  # a decimal of more characters is above MAX_LOG_AMOUNT whatever it holds (parsed no further)
