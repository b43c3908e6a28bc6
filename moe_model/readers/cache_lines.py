"""llama_moe_cache lines of a form the log parser (readers.logs) does not know, such as b12170+'s start-up and
teardown lines: what can be read of them (cache MiB, slots, hit and miss counts), kept apart from b11549's lines,
and the lines nothing could be read from, named in one note."""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import asdict, dataclass, field

from moe_model.limits import MAX_ALERT_CHARS, shown

_LOOSE_MIB = re.compile(r"(\d+(?:\.\d+)?)\s*MiB")
_LOOSE_SLOTS = re.compile(r"(\d+)\s+slots\b|\bslots\s*[=:]\s*(\d+)")
_LOOSE_HITS = re.compile(r"\bhits\s*[=:]\s*(\d+)")
_LOOSE_MISSES = re.compile(r"\bmisses\s*[=:]\s*(\d+)")
_UNREAD_SHOWN = 3  # lines of an unknown form quoted in their note (the rest counted)


@dataclass
class OtherCacheLines:
    """llama_moe_cache lines of a form this parser does not know (b12170+'s): what could be read of them (the cache
    MiB and slots of start-up lines, hits and misses of teardown lines, summed), never mixed with b11549's lines."""

    cache_mib: float | None = None
    slots: int | None = None
    hits: int = 0
    misses: int = 0
    n_read: int = 0  # lines a number was read from
    unread: list[str] = field(default_factory=list)  # the first _UNREAD_SHOWN lines nothing was read from
    n_unread: int = 0

    @property
    def hit_rate(self) -> float | None:
        return self.hits / (self.hits + self.misses) if self.hits + self.misses else None

    def note(self) -> str | None:
        """One line naming the lines that could not be read."""
        if not self.n_unread:
            return None
        more = f" and {self.n_unread - len(self.unread)} more" if self.n_unread > len(self.unread) else ""
        quoted = " | ".join(self.unread)
        return f"{self.n_unread} llama_moe_cache line(s) of a form this tool does not know, not read: {quoted}{more}"

    def as_dict(self) -> dict:
        return asdict(self) | {"hit_rate": self.hit_rate}

    def read(self, text: str, as_int: Callable[[str, str], int], as_float: Callable[[str, str], float]) -> None:
        """One such line (after `llama_moe_cache:`): its hits and misses, else its cache MiB and slots, else it is
        named as unread; `as_int` and `as_float` are the parser's bounded numbers."""
        hits, misses = _LOOSE_HITS.search(text), _LOOSE_MISSES.search(text)
        slots, mib = _LOOSE_SLOTS.search(text), _LOOSE_MIB.search(text)
        if hits and misses:
            self.hits += as_int(hits.group(1), "hits")
            self.misses += as_int(misses.group(1), "misses")
        elif slots or mib:  # a start-up line: the cache's size (the first MiB figure) and slots
            if slots:
                self.slots = (self.slots or 0) + as_int(slots.group(1) or slots.group(2), "cache group slots")
            if mib and self.cache_mib is None:
                self.cache_mib = as_float(mib.group(1), "cache MiB")
        else:
            self.n_unread += 1
            if len(self.unread) < _UNREAD_SHOWN:
                self.unread.append(shown(text, MAX_ALERT_CHARS))
            return
        self.n_read += 1
