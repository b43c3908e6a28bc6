"""How a decode speed at `-np > 1` reads: llama-server's streams decode in lockstep, and the speed this tool
predicts (and a log's concurrent requests sum to) is their total; each stream, one user, gets its share."""

from __future__ import annotations


def per_stream_tps(total_tps: float, concurrency: int) -> float:
    """One stream's share of a total decode speed (the streams decode the same ubatches in lockstep)."""
    return total_tps / max(1, concurrency)


def total_over_streams(concurrency: int, total_tps: float | None = None) -> str:
    """The words that name a speed at `-np > 1` a total: "total over 4 streams (per stream 10.7 t/s)" (without
    the share when no speed is given, for an axis or a column); "" for one stream, whose speed is its own."""
    if concurrency <= 1:
        return ""
    share = "" if total_tps is None else f" (per stream {per_stream_tps(total_tps, concurrency):.1f} t/s)"
    return f"total over {concurrency} streams{share}"


def speed_note(total_tps: float, concurrency: int) -> str:
    """What follows a decode speed in a sentence: ", total over N streams (per stream X t/s)", or ""."""
    words = total_over_streams(concurrency, total_tps)
    return f", {words}" if words else ""


def speed_label(label: str, concurrency: int) -> str:
    """An axis's or a column's name for decode speeds: "decode t/s (total over 4 streams)" at `-np > 1`."""
    words = total_over_streams(concurrency)
    return f"{label} ({words})" if words else label


def column_label(label: str, concurrencies: list[int]) -> str:
    """A column over runs of several `-np` (each row's beside it): named a total where any of them has streams."""
    values = set(concurrencies) or {1}
    if len(values) == 1:
        return speed_label(label, values.pop())
    return f"{label} (total over each run's -np streams)" if max(values) > 1 else label
