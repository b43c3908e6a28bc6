"""The cache's verdict against the same placement without it: one rule for `predict`, `recommend` and Explore.

'helps' or 'hurts' where the two decode ranges are apart, 'too close to call' where they overlap
(time_model.range_verdict), and 'too close to call on current builds' where a modelled policy's readings put the
cache's speed on both sides of the speed without it. The sentence shows both sides' ranges, so the reader sees why.
"""

from __future__ import annotations

from dataclasses import dataclass

from moe_model.speed.ranges import POLICY_SOURCE
from moe_model.speed.streams import speed_note
from moe_model.speed.time_model import Prediction, verdict

NO_CACHE = "no cache"
NOT_COMPARED = "not compared"  # no setting of the same placement without a cache was priced
TOO_CLOSE = "too close to call"
TOO_CLOSE_ON_READINGS = "too close to call on current builds"  # ClassLRU's open readings straddle no cache
WITHOUT = "for the same placement without it"


@dataclass(frozen=True)
class CacheVerdict:
    """The verdict word (the JSON's `verdict`) and both sides' speeds and ranges; `band`: the modelled policy's
    readings' speeds where they straddle the speed without a cache."""

    word: str
    with_cache: tuple[float, float, float]  # decode t/s, range low, range high
    without: tuple[float, float, float] | None  # None: the same placement without a cache does not run
    concurrency: int = 1
    band: tuple[float, float] | None = None

    @property
    def sentence(self) -> str:
        """One sentence with a verb: the word, both speeds with their ranges, and why (apart or overlapping)."""
        if self.word == NO_CACHE:
            return "this setting runs no cache"
        if self.word == NOT_COMPARED:
            return "the cache is not compared: no setting of the same placement without it was priced"
        if self.word == "does not fit":
            return "the cache does not fit: this setting does not start or fit the GPU's memory"
        verb = f"is {self.word}" if self.word.startswith(TOO_CLOSE) else self.word
        mine = self._speed(self.with_cache)
        if self.without is None:
            return f"the cache {verb}: {mine}, and the same placement without it does not run"
        said = f"the cache {verb}: {mine} against {self._speed(self.without)} {WITHOUT}"
        return said + "; " + self._why()

    def _speed(self, speed: tuple[float, float, float]) -> str:
        tps, lo, hi = speed
        return f"{tps:.1f} t/s (range {lo:.1f}-{hi:.1f}){speed_note(tps, self.concurrency)}"

    def _why(self) -> str:
        if self.word == TOO_CLOSE_ON_READINGS:
            lo, hi = self.band
            return f"ClassLRU's open readings put it at {lo:.1f}-{hi:.1f} t/s, on both sides of the speed without it"
        (_, lo, hi), (_, lo_without, hi_without) = self.with_cache, self.without
        if self.word == TOO_CLOSE:
            return f"the ranges overlap ({max(lo, lo_without):.1f}-{min(hi, hi_without):.1f} t/s)"
        return "the ranges are apart"

    def as_dict(self) -> dict:
        return {"verdict": self.word, "verdict_line": self.sentence}


def _speed(p: Prediction) -> tuple[float, float, float]:
    return (p.decode_tps, *p.decode_tps_range)


def cache_verdict(with_cache: Prediction, without: Prediction | None) -> CacheVerdict:
    """The cache against the same placement without it (None: not priced)."""
    concurrency = with_cache.scenario.concurrency
    if not with_cache.scenario.budget_mib or without is None:
        word = NO_CACHE if not with_cache.scenario.budget_mib else NOT_COMPARED
        return CacheVerdict(word, _speed(with_cache), None, concurrency)
    other = _speed(without) if without.usable else None
    band = next((s for s in with_cache.range_sources if s.source == POLICY_SOURCE), None)
    if band is not None and without.usable and band.low_tps < without.decode_tps < band.high_tps:
        straddle = (band.low_tps, band.high_tps)
        return CacheVerdict(TOO_CLOSE_ON_READINGS, _speed(with_cache), other, concurrency, straddle)
    return CacheVerdict(verdict(with_cache, without), _speed(with_cache), other, concurrency)
