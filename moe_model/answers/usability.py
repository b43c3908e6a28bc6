"""Usable, slow or unusable: one rule for every page and command, with what would make a setting usable.

The lines are limits' UNUSABLE_* and SLOW_* (decode t/s and seconds to the first token); the remedy names the
term that dominates the decode time (speed.term_words), or the RAM the experts need where they stream from disk.
"""

from __future__ import annotations

from dataclasses import dataclass

from moe_model.limits import SLOW_DECODE_TPS, SLOW_FIRST_TOKEN_S, UNUSABLE_DECODE_TPS, UNUSABLE_FIRST_TOKEN_S
from moe_model.speed.streams import per_stream_tps
from moe_model.speed.term_words import term_words
from moe_model.speed.time_model import Prediction

USABLE, SLOW, UNUSABLE = "usable", "slow", "unusable"

# what shortens each term, in words a buyer acts on (the disk term is only there when the experts stream: remedy
# names the RAM that ends it)
_REMEDIES = {
    "experts_cpu": "a larger cache budget or more layers on the GPU, so fewer experts run on the CPU",
    "upload": "a larger cache budget (fewer misses) or a faster link to the GPU",
    "experts_gpu": "a GPU with more memory bandwidth",
    "dense": "a GPU with more memory bandwidth, or the dense layers on the GPU",
    "attention": "a shorter context, or the KV cache on the GPU",
    "sync": "fewer layers split between GPU and CPU",
    "split": "fewer layers split between GPU and CPU",
    "gpu_compute": "a GPU with more compute, or shorter prompts",
    "expert_matmuls": "a GPU with more compute, or shorter prompts",
    "copy_from_cache": "a GPU with more memory bandwidth, or shorter prompts",
}


@dataclass(frozen=True)
class Usability:
    """The word (usable / slow / unusable), why in figures, and what would help."""

    word: str
    why: tuple[str, ...]  # e.g. "0.1 t/s decode is below 2 t/s"
    remedy: str  # "" when usable

    @property
    def sentence(self) -> str:
        """One sentence with a verb, e.g. 'This setting is unusable: 0.1 t/s decode is below 2 t/s; more RAM ...'."""
        return self.tagged("")

    def tagged(self, tag: str) -> str:
        """The sentence with `tag` (a page's basis badge) closing each part that quotes a figure."""
        if self.word == USABLE:
            return "This setting is usable: decode and the first token are within what a person waits for."
        end = f" {tag}." if tag else "."
        said = f"This setting is {self.word}: {'; '.join(self.why)}{end}"
        return said + (f" What would help: {self.remedy}{end}" if self.remedy else "")

    def as_dict(self) -> dict:
        return {"usability": self.word, "usability_line": self.sentence}


def _why(p: Prediction, low_tps: float, long_s: float) -> tuple[str, ...]:
    """The figures past the lines; decode is judged per stream, the speed each waiting person sees."""
    why, streams, first_token_s = [], p.scenario.concurrency, p.ttft_s
    stream_tps = per_stream_tps(p.decode_tps, streams)
    if stream_tps < low_tps:
        total = f" ({p.decode_tps:.1f} t/s total over {streams} streams)" if streams > 1 else ""
        why.append(f"{stream_tps:.1f} t/s decode{' per stream' if streams > 1 else ''}{total} is below {low_tps:g} t/s")
    if first_token_s > long_s:
        why.append(f"the first token comes after {first_token_s:.0f} s, more than {long_s:g} s")
    return tuple(why)


def remedy(p: Prediction, prompt: bool = False) -> str:
    """What would shorten the slowest part: the RAM the experts need where they stream, else the largest term of
    the decode (or, `prompt`, the prompt's) time."""
    if p.layout.ram.streams:
        return f"{p.layout.ram.needed_gib} GiB of RAM, so the experts stay in memory, not read from the drive"
    terms = p.prefill_breakdown_ms if prompt else p.breakdown_ms
    if not terms:
        return ""
    term = max(terms, key=terms.get)
    return _REMEDIES.get(term, f"less time on {term_words(term, prompt)}")


def usability(p: Prediction) -> Usability:
    """A usable prediction's word: unusable under the UNUSABLE_* lines, slow under the SLOW_* ones."""
    stream_tps = per_stream_tps(p.decode_tps, p.scenario.concurrency)
    unusable = _why(p, UNUSABLE_DECODE_TPS, UNUSABLE_FIRST_TOKEN_S)
    if unusable:
        return Usability(UNUSABLE, unusable, remedy(p, prompt=stream_tps >= UNUSABLE_DECODE_TPS))
    slow = _why(p, SLOW_DECODE_TPS, SLOW_FIRST_TOKEN_S)
    if slow:
        return Usability(SLOW, slow, remedy(p, prompt=stream_tps >= SLOW_DECODE_TPS))
    return Usability(USABLE, (), "")
