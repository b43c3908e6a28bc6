"""A prediction's answer drawn (issue 38): the four headline figures as cards with their basis badges, usable /
slow / unusable as a box of its colour with what would help, the nearest measured row as a caption, and the
sentences of details with a badge on each figure. The figures and words come from moe_model.answers."""

from __future__ import annotations

from collections.abc import Sequence

from moe_model.answers.basis import MEASURED, MODELLED, Basis
from moe_model.answers.headline import Figure
from moe_model.answers.nearest_row import nearest_row
from moe_model.answers.usability import SLOW, UNUSABLE, Usability
from moe_model.fits.calibration import prompt_speed
from moe_model.fits.log_timings import request_label
from moe_model.speed.hardware import Hardware
from moe_model.speed.streams import speed_note
from moe_model.speed.time_model import Prediction
from ui.badges import badge
from ui.text import literal


def metric_cards(box, figures: Sequence[Figure]) -> None:
    """One card per figure in a row of `box`: its value, its range below it, its basis as a badge in the label."""
    for column, f in zip(box.columns(len(figures)), figures, strict=True):
        column.metric(
            f"{f.label} {badge(f.basis)}" if f.basis else f.label,
            f.value,
            f.range or None,
            delta_color="off",
            delta_arrow="off",
            help=f.why or None,
            border=True,
        )


def usability_box(box, text: str, said: Usability) -> None:
    """`text` and the usability sentence in a box of its word's colour: success only for a usable setting."""
    shown = box.error if said.word == UNUSABLE else box.warning if said.word == SLOW else box.success
    shown(f"{text} {said.sentence}")


def nearest_caption(box, model_name: str, pred: Prediction, hw: Hardware) -> None:
    """The measured row nearest the prediction (same family and kind of placement, nearest card), with its source."""
    row = nearest_row(model_name, pred.scenario, hw)
    if row is not None:
        box.caption(f"{badge(MEASURED)} {literal(row.sentence(model_name), None)}")


def prompt_text(pred: Prediction, prefill_rel_error: float, basis: Basis) -> str:
    """The prompt's figures beside a decode speed: prompt t/s and time to first token, each with its range where
    the calibration measured one (calibration.prompt_speed), each with its basis badge."""
    ps = prompt_speed(pred, prefill_rel_error)
    (lo, hi), (first, last) = ps.prefill_tps_range, ps.ttft_s_range
    ranged, tag = prefill_rel_error > 0, badge(basis.prompt)
    speed = f"{ps.prefill_tps:,.0f} t/s" + (f" (range {lo:,.0f}–{hi:,.0f})" if ranged else "")
    ttft = f"{ps.ttft_s:.2f} s" + (f" (range {first:.2f}–{last:.2f})" if ranged else "")
    return f"prompt of {pred.scenario.prompt_tokens:,} tokens {speed} {tag}, first token after {ttft} {tag}"


def decode_text(pred: Prediction, basis: Basis) -> str:
    """'12.3 t/s decode (range 9.8–14.1, steady state) :badge:' with the streams' share at -np > 1."""
    lo, hi = pred.decode_tps_range
    return (
        f"{pred.decode_tps:.1f} t/s decode (range {lo:.1f}–{hi:.1f}, {request_label(first=False)})"
        f"{speed_note(pred.decode_tps, pred.scenario.concurrency)} {badge(basis.decode)}"
    )


def first_request_text(pred: Prediction) -> str:
    """The server's first request beside the steady state, where its cold pool makes it slower."""
    first = pred.first_request
    if not first or not first.cold_fills or first.decode_tps >= 0.99 * pred.decode_tps:
        return ""
    return f" {first.decode_words()} {badge(MODELLED)}."


def _hit_rate(pred: Prediction) -> str:
    return "—" if pred.hit_rate is None else f"{100 * pred.hit_rate:.1f} %"


def best_details(label: str, pred: Prediction, cache_sentence: str, prefill_rel_error: float, basis: Basis) -> str:
    """The recommender's pick in one sentence: its label, then every figure with its badge."""
    return (
        f"**Best setting: {label}**: {decode_text(pred, basis)} at {pred.scenario.context_depth:,} tokens of context; "
        f"{prompt_text(pred, prefill_rel_error, basis)}; hit rate {_hit_rate(pred)} {badge(basis.hit_rate)}; "
        f"{cache_sentence} {badge(basis.decode)}."
    )


def details(pred: Prediction, cache_sentence: str, prefill_rel_error: float, basis: Basis) -> str:
    """The headline's sentence at the chosen budget: every figure of the cards with its context, and the layout's."""
    said, hit = cache_sentence, _hit_rate(pred)
    return (
        f"**At {pred.scenario.budget_mib:,} MiB**: {decode_text(pred, basis)} at {pred.scenario.context_depth:,} "
        f"tokens of context; {prompt_text(pred, prefill_rel_error, basis)}; hit rate {hit} {badge(basis.hit_rate)} "
        f"(simulated, {pred.scenario.policy_name}); {len(pred.layout.host_layers)} layers' experts in host memory, "
        f"VRAM left {pred.vram.free_mib:,.0f} MiB {badge(MODELLED)}. {said[:1].upper()}{said[1:]} "
        f"{badge(basis.decode)}.{first_request_text(pred)}"
    )
