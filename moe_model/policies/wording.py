"""How every output words where a hit rate comes from, computed from the policy that produced it.

"exact" only for a policy that transcribes a documented implementation (b11480-b12169's plain LRU, Belady's
optimum), and "as llama.cpp's cache would serve" only where that policy is the one the build runs; "modelled"
for our reading of a description (ClassLRU, the CPU share). Pages and the CLI take their words from
hit_rate_wording rather than spelling "exact" themselves.
"""

from __future__ import annotations

from dataclasses import dataclass

from moe_model.llama.builds import CLASS_LRU_BUILD, FIRST_CACHE_BUILD, has_cache
from moe_model.policies import EXACT, get_policy, policy_for_build


@dataclass(frozen=True)
class HitRateWording:
    policy: str  # the policy's name, e.g. "lru-b11549"
    how: str  # "exact" or "modelled": the policy's label
    tag: str  # "lru-b11549 (exact)"
    line: str  # "Hit rates: lru-b11549 (exact), llama.cpp b11549."
    sentence: str  # "Hit rates are simulated exactly as llama.cpp b11549's cache would serve the workload (...)"


def hit_rate_wording(policy_name: str, build: int, cpu_share: float = 0.0) -> HitRateWording:
    """The words beside hit rates that `policy_name` produced for a server of `build` (with --moe-cache-cpu-share
    `cpu_share`): whether they are exact, and whether they are what that build's cache would do."""
    policy = get_policy(policy_name)
    runs = policy_for_build(build, cpu_share)
    tag = f"{policy.name} ({policy.label})"
    if not has_cache(build):  # a build before the cache: no hit rate is its own
        sentence = (
            f"llama.cpp b{build} has no MoE cache: --moe-cache-mib came in b{FIRST_CACHE_BUILD}, so a cache takes "
            f"b{FIRST_CACHE_BUILD} or later; the hit rates shown are {tag}'s, what b{FIRST_CACHE_BUILD}-"
            f"b{CLASS_LRU_BUILD - 1} would serve"
        )
        line = f"llama.cpp b{build} has no MoE cache (it came in b{FIRST_CACHE_BUILD}); hit rates: {tag}."
        return HitRateWording(policy.name, policy.label, tag, line, sentence)
    if policy.name != runs:
        sentence = f"Hit rates are {policy.name}'s ({policy.label}), not the policy llama.cpp b{build} runs ({runs})"
    elif policy.label == EXACT:
        sentence = (
            f"Hit rates are simulated exactly as llama.cpp b{build}'s cache would serve the workload ({policy.name}, "
            "a transcription of its code)"
        )
    else:
        sentence = (
            f"Hit rates are modelled: {policy.name}, our reading of the policy llama.cpp b{build} runs (not a "
            "transcription of its code), replayed on the workload"
        )
    return HitRateWording(policy.name, policy.label, tag, f"Hit rates: {tag}, llama.cpp b{build}.", sentence)
