"""A prediction's headline figures (issue 38): decode t/s, prompt t/s, first token and hit rate, each with its range
and the word for how it is known (answers.basis); pages draw them as cards, the figures are computed here.

The ranges are the ones every page gives: decode's from the prediction (speed.ranges), the prompt's and the first
token's from the prompt's left-out error (fits.calibration.prompt_speed), the hit rate's from a modelled policy's
readings (its band) or else the routing's spread in hit-rate points.
"""

from __future__ import annotations

from dataclasses import dataclass

from moe_model.answers.basis import Basis
from moe_model.fits.calibration import prompt_speed
from moe_model.speed.streams import total_over_streams
from moe_model.speed.time_model import Prediction


@dataclass(frozen=True)
class Figure:
    """One headline figure: what it is, its value and range as shown, its basis word and why."""

    label: str  # "decode t/s", "first token (s)": short, a card's label is one line
    value: str  # "0.1 t/s"; "—" where there is no figure (no cache: no hit rate)
    range: str  # "range 0.0–5.8", "readings 50.1–55.0 %", or "" where none is known
    basis: str  # answers.basis's word; "" where there is no figure
    why: str  # the basis's reason, a tooltip


def prompt_tps_text(tps: float) -> str:
    """A prompt speed as shown: whole tokens a second, one decimal below 10 (a drive-bound prompt's 0.8 t/s)."""
    return f"{tps:,.0f}" if tps >= 10 else f"{tps:.1f}"


def _hit_rate(pred: Prediction, basis: Basis, spread_points: float) -> Figure:
    why = dict(basis.why)["hit_rate"]
    if pred.hit_rate is None:
        return Figure("hit rate", "—", "no cache at this budget", "", "")
    band = pred.policy_band
    if band is not None:
        spread = f"readings {100 * band.hit_rate_low:.1f}–{100 * band.hit_rate_high:.1f} %"
    else:
        spread = f"±{spread_points:.1f} points (routing)" if spread_points > 0 else ""
    return Figure("hit rate", f"{100 * pred.hit_rate:.1f} %", spread, basis.hit_rate, why)


def headline_figures(
    pred: Prediction, basis: Basis, prefill_rel_error: float, spread_points: float = 0.0
) -> tuple[Figure, ...]:
    """Decode, prompt, first token and hit rate of a prediction that runs; `spread_points`: the routing's ± in
    hit-rate points (0: a replayed trace), shown where no policy band is."""
    why = dict(basis.why)
    lo, hi = pred.decode_tps_range
    ps = prompt_speed(pred, prefill_rel_error)
    (p_lo, p_hi), (first, last) = ps.prefill_tps_range, ps.ttft_s_range
    ranged = prefill_rel_error > 0  # a prompt range only where the calibration measured its error
    streams = total_over_streams(pred.scenario.concurrency, pred.decode_tps)  # "" for one stream
    decode = Figure(
        "total decode t/s" if streams else "decode t/s",
        f"{pred.decode_tps:.1f}",
        f"range {lo:.1f}–{hi:.1f}",
        basis.decode,
        f"{streams[:1].upper()}{streams[1:]}. {why['decode_tps']}" if streams else why["decode_tps"],
    )
    prompt = Figure(
        "prompt t/s",
        prompt_tps_text(ps.prefill_tps),
        f"range {prompt_tps_text(p_lo)}–{prompt_tps_text(p_hi)}" if ranged else "",
        basis.prompt,
        f"A prompt of {pred.scenario.prompt_tokens:,} tokens. {why['prefill_tps']}",
    )
    ttft = Figure(
        "first token (s)",
        f"{ps.ttft_s:,.2f}",
        f"range {first:,.2f}–{last:,.2f}" if ranged else "",
        basis.prompt,
        why["prefill_tps"],
    )
    return decode, prompt, ttft, _hit_rate(pred, basis, spread_points)
