"""Which llama.cpp build does what with the MoE cache: the release facts, each with its source, in one place.

Build numbers are llama.cpp's release tags (bNNNNN), printed at the top of every log as `build: NNNNN (hash)`.
Sources: docs/llamacpp-cache.md sections 1 and 10 (release pages b11480, b12170, tag b12191) and issue 20 (#32584,
#32636 at b12569). llama.cpp also names releases `vX.Y.Z` (semantic versions, from 2026); NAMED_RELEASES maps them.
"""

from __future__ import annotations

import re

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_BUILD, shown

FIRST_CACHE_BUILD = 11480  # release b11480 (#29887): the first with --moe-cache-mib, plain LRU
CLASS_LRU_BUILD = 12170  # release b12170 (#31233): ClassLRU replaces the plain LRU
CPU_SHARE_BUILD = 12191  # tag b12191 (#30966): --moe-cache-cpu-share and docs/moe-cache.md
GRAPH_RESERVE_BUILD = 12569  # b12569 (#32636): graph nodes reserved for the cache's lookups (#32584 aborted before)
MAINLINE_BUILD = 12569  # the default: the current mainline build as of issue 20
EXACT_BUILD = 11549  # the build the exact simulator transcribes (the ground-truth runs)


# v1.0.0 (13 Nov 2026) came after b12352 and before b12375 (issue 38; the exact tag was not found in the sources
# read): taken as the earliest it can be, b12353. Every rule here answers the same for any of b12353-b12374.
NAMED_RELEASES = {"1.0.0": 12353}
_SEMVER = re.compile(r"v?(\d+\.\d+\.\d+)")


def check_build(build: int) -> int:
    """A build number as a user gives it (`--build 12569`, `b12569`): refused in one line outside 1..MAX_BUILD."""
    if isinstance(build, bool) or not isinstance(build, int) or not 1 <= build <= MAX_BUILD:
        raise MoeModelError(f"a llama.cpp build is a release number (1..{MAX_BUILD}), e.g. {MAINLINE_BUILD}: {build!r}")
    return build


def parse_build(text: str) -> int:
    """`12569`, `b12569` or a named release (`v1.0.0`: NAMED_RELEASES) as a build number."""
    if named := _SEMVER.fullmatch(text.strip().lower()):
        return _named_release(named.group(1))
    digits = text.strip().lower().removeprefix("b")
    if not digits.isdigit():
        raise MoeModelError(
            f"a llama.cpp build is a release number, e.g. {MAINLINE_BUILD}, b{MAINLINE_BUILD} or a named release "
            f"(v1.0.0): {shown(text)!r}"
        )
    return check_build(int(digits))


def named_release_note(text: str) -> str | None:
    """How a named release (`v1.0.0`) was read, in one line; None for a bNNNNN or a number (read as given)."""
    named = _SEMVER.fullmatch(text.strip().lower())
    if not named or named.group(1) not in NAMED_RELEASES:
        return None
    return (
        f"v{named.group(1)} is read as b{NAMED_RELEASES[named.group(1)]}, the earliest build it can be (it came after "
        "b12352 and before b12375; this tool's build rules answer the same for any of them)"
    )


def _named_release(version: str) -> int:
    """The build of a `vX.Y.Z` release, refused in one line where the mapping is not known."""
    if version not in NAMED_RELEASES:
        known = ", ".join(f"v{v}" for v in NAMED_RELEASES)
        raise MoeModelError(
            f"llama.cpp release v{version} is not mapped to a build number here (known: {known}): give its "
            "bNNNNN, the `build:` line of its log"
        )
    return NAMED_RELEASES[version]


def build_of_mib_only_log(given: int | None) -> int:
    """The build of a run whose log names none but prints its cache size in MiB only ("MoE cache size = X MiB for
    Y MiB of host experts", b11549's line): a plain-LRU build, since #31233 (b12170) "display[s] the cache size in
    token worth count" (docs/llamacpp-cache.md sections 9 and 10). `given` when it is one, else b11549."""
    return given if given is not None and FIRST_CACHE_BUILD <= given < CLASS_LRU_BUILD else EXACT_BUILD


def has_cache(build: int) -> bool:
    return build >= FIRST_CACHE_BUILD


def has_cpu_share(build: int) -> bool:
    return build >= CPU_SHARE_BUILD


def uses_class_lru(build: int) -> bool:
    return build >= CLASS_LRU_BUILD


def check_cache_flags(build: int, budget_mib: int, cpu_share: float) -> None:
    """Refuse, in one line, a flag the build does not have."""
    if budget_mib > 0 and not has_cache(build):
        raise MoeModelError(
            f"llama.cpp b{build} has no MoE cache (--moe-cache-mib came in b{FIRST_CACHE_BUILD}): use a later build "
            "or no cache"
        )
    if cpu_share > 0 and not has_cpu_share(build):
        raise MoeModelError(f"--moe-cache-cpu-share came in b{CPU_SHARE_BUILD}; b{build} does not have it")
