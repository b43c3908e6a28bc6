"""A prediction's answer drawn (issue 38): the four headline figures as cards with their basis badges, usable /
slow / unusable as a box of its colour with what would help, the nearest measured row as a caption, and the
sentences of details with a badge on each figure. The figures and words come from moe_model.answers."""

from __future__ import annotations

from collections.abc import Sequence

from moe_model.answers.basis import MEASURED, MODELLED, Basis
from moe_model.answers.headline import Figure
from moe_model.answers.nearest_row import nearest_row
from moe_model.answers.usability import SLOW, UNUSABLE, Usability
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


def usability_box(box, text: str, said: Usability, basis: str) -> None:
    """`text` and the usability sentence in a box of its word's colour (success only for a usable setting), each
    figure it quotes with the badge of `basis`, the decode's."""
    shown = box.error if said.word == UNUSABLE else box.warning if said.word == SLOW else box.success
    shown(f"{text} {said.tagged(badge(basis))}".strip())


def nearest_caption(box, model_name: str, pred: Prediction, hw: Hardware) -> None:
    """The measured row nearest the prediction (same family and kind of placement, nearest card), with its source."""
    row = nearest_row(model_name, pred.scenario, hw)
    if row is not None:
        box.caption(f"{badge(MEASURED)} {literal(row.sentence(model_name), None)}")


def prompt_text(pred: Prediction, figures: Sequence[Figure]) -> str:
    """The prompt's figures beside a decode speed, from the headline's figures (answers.headline: computed once for
    the cards and the sentence): prompt t/s and time to first token, each with its range where the calibration
    measured one, each with its basis badge."""
    _, prompt, ttft, _ = figures
    speed = f"{prompt.value} t/s" + (f" ({prompt.range})" if prompt.range else "")
    first = f"{ttft.value} s" + (f" ({ttft.range})" if ttft.range else "")
    return (
        f"prompt of {pred.scenario.prompt_tokens:,} tokens {speed} {badge(prompt.basis)}, first token after {first} "
        f"{badge(ttft.basis)}"
    )


def decode_text(pred: Prediction, basis: Basis) -> str:
    """'12.3 t/s decode (range 9.8–14.1, steady state) :badge:' with the streams' share at -np > 1."""
    lo, hi = pred.decode_tps_range
    return (
        f"{pred.decode_tps:.1f} t/s decode (range {lo:.1f}–{hi:.1f}, {request_label(first=False)})"
        f"{speed_note(pred.decode_tps, pred.scenario.concurrency)} {badge(basis.decode)}"
    )


def first_request_text(pred: Prediction) -> str:
    """The server's first request beside the steady state, where its cold pool makes it slower ("" where not)."""
    first = pred.first_request
    if not first or not first.cold_fills or first.decode_tps >= 0.99 * pred.decode_tps:
        return ""
    return f" {badge(MODELLED)} {first.decode_words()}."


def _hit_rate(pred: Prediction, basis: Basis) -> str:
    """'Hit rate 96.9 % :badge: (simulated, class-lru-b12170).', or that no cache runs."""
    if pred.hit_rate is None:
        return "No cache runs, so there is no hit rate."
    return f"Hit rate {100 * pred.hit_rate:.1f} % {badge(basis.hit_rate)} (simulated, {pred.scenario.policy_name})."


def _sentences(pred: Prediction, figures: Sequence[Figure], cache_sentence: str, basis: Basis) -> str:
    """Decode at the context depth, the prompt, the hit rate and the cache's verdict: a sentence each, each figure's
    sentence with its badge."""
    prompt = prompt_text(pred, figures)
    return (
        f"{decode_text(pred, basis)} at {pred.scenario.context_depth:,} tokens of context. {prompt[:1].upper()}"
        f"{prompt[1:]}. {_hit_rate(pred, basis)} {badge(basis.decode)} {cache_sentence[:1].upper()}"
        f"{cache_sentence[1:]}."
    )


def best_details(label: str, pred: Prediction, figures: Sequence[Figure], cache_sentence: str, basis: Basis) -> str:
    """The recommender's pick: its label, then every figure with its badge (`figures`: its headline_figures)."""
    return f"**Best setting: {label}**: {_sentences(pred, figures, cache_sentence, basis)}"


def details(pred: Prediction, figures: Sequence[Figure], cache_sentence: str, basis: Basis) -> str:
    """The headline's sentences at the chosen budget: every figure of the cards (`figures`, the cards' own) with its
    context, and the layout."""
    return (
        f"**At {pred.scenario.budget_mib:,} MiB**: {_sentences(pred, figures, cache_sentence, basis)} "
        f"{len(pred.layout.host_layers)} layers' experts in host memory, VRAM left {pred.vram.free_mib:,.0f} MiB "
        f"{badge(MODELLED)}.{first_request_text(pred)}"
    )
