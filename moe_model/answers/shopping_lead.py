"""Shopping's first answer, for the user's own card (issue 38): its decode speed with its range, the best
alternative's, and a verdict with a verb (how much faster, or too close to call where the two ranges overlap);
the user's setting said usable, slow or unusable with what would help, and the nearest measured row beside it.

Every card sits in the user's host (ui.machine.in_host), so the RAM the verdict names is the user's.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

from moe_model.answers.basis import MODELLED, text_tag
from moe_model.answers.fit_advice import CardAnswer, ram_words
from moe_model.answers.nearest_row import MeasuredRow, nearest_row
from moe_model.answers.usability import USABLE, Usability, usability
from moe_model.answers.verdict import TOO_CLOSE
from moe_model.speed.streams import speed_note
from moe_model.speed.time_model import range_verdict


@dataclass(frozen=True)
class CardFigure:
    """One card's best decode speed, its range and how it is known; decode_tps None where nothing runs on it."""

    name: str
    decode_tps: float | None
    range_tps: tuple[float, float]
    basis: str  # answers.basis's word for the decode figure
    concurrency: int = 1
    fit_line: str | None = None  # what would let it run, where nothing does (CardAnswer.fit_line without the name)

    def said(self, tag: Callable[[str], str] = text_tag) -> str:
        """'RTX 4080 16GB: 1.1 t/s decode (range 0.1-1.6) [modelled]', or what would let it run."""
        if self.decode_tps is None:  # what would fit: the memory model's
            return f"{self.name}: nothing runs ({self.fit_line or 'no setting fits'}) {tag(MODELLED)}"
        lo, hi = self.range_tps
        note = speed_note(self.decode_tps, self.concurrency)
        return f"{self.name}: {self.decode_tps:.1f} t/s decode{note} (range {lo:.1f}-{hi:.1f}) {tag(self.basis)}"


def card_figure(answer: CardAnswer, basis: str) -> CardFigure:
    best = answer.best
    if best is None:
        change = answer.fit_line.split(": ", 1)[-1] if answer.fit_line else None
        return CardFigure(answer.hardware.name, None, (0.0, 0.0), basis, fit_line=change)
    p = best.prediction
    lo, hi = p.decode_tps_range
    return CardFigure(answer.hardware.name, p.decode_tps, (lo, hi), basis, p.scenario.concurrency)


@dataclass(frozen=True)
class ShoppingLead:
    """What Shopping says first: the user's card, the best alternative (None: no other card runs it or none is
    compared), the verdict, the user's setting's usability (None: nothing runs on it) and the nearest measured
    row for the user's card (None: no row of the family and placement)."""

    yours: CardFigure
    alternative: CardFigure | None
    verdict: str
    usability: Usability | None
    nearest: MeasuredRow | None
    nearest_line: str = ""  # the nearest row's sentence (MeasuredRow.sentence), "" where there is none

    @property
    def warns(self) -> bool:
        """Shown as a warning, never as a success: the user's card runs nothing, or runs it slowly or unusably."""
        return self.usability is None or self.usability.word != USABLE

    def figures(self, tag: Callable[[str], str] = text_tag) -> str:
        """'Your RTX 4080 16GB: 1.1 t/s decode (range 0.1-1.6) [modelled]; best alternative RTX 5090: ...'."""
        said = f"Your {self.yours.said(tag)}"
        return said + (f"; best alternative {self.alternative.said(tag)}" if self.alternative else "")

    def lines(self, tag: Callable[[str], str] = text_tag) -> tuple[str, ...]:
        """The figures, the verdict, and where the user's setting is not usable, why and what would help; each
        with the `tag` of its figures' basis (the verdict: the compared cards' decode words; no card running, the
        memory model's)."""
        running = [f.basis for f in (self.yours, self.alternative) if f is not None and f.decode_tps is not None]
        verdict = f"{' '.join(tag(w) for w in dict.fromkeys(running or [MODELLED]))} {self.verdict}"
        unusable = self.usability and self.usability.word != USABLE
        warn = (self.usability.tagged(tag(self.yours.basis)),) if unusable else ()
        return (self.figures(tag), verdict, *warn)


def shopping_lead(model_name: str, answers: Sequence[CardAnswer], decode_bases: Sequence[str]) -> ShoppingLead:
    """The lead for `answers` (the user's card first, then the compared cards in the user's host), with each
    card's decode basis word (answers.basis) in the same order."""
    mine, others = answers[0], list(zip(answers[1:], decode_bases[1:], strict=True))
    running = sorted((pair for pair in others if pair[0].best), key=lambda pair: -pair[0].best.prediction.decode_tps)
    alt = running[0][0] if running else None
    best = mine.best
    row = nearest_row(model_name, best.prediction.scenario, mine.hardware) if best else None
    return ShoppingLead(
        card_figure(mine, decode_bases[0]),
        card_figure(*running[0]) if running else None,
        lead_verdict(answers, alt),
        usability(best.prediction) if best else None,
        row,
        row.sentence(model_name) if row else "",
    )


def lead_verdict(answers: Sequence[CardAnswer], alt: CardAnswer | None) -> str:
    """One sentence with a verb comparing the user's card (answers[0]) with the best alternative `alt`: how much
    faster which is and whether the ranges tell them apart; or which of them runs; or, when none runs, the least RAM
    that would let one run. The RAM it names is the user's host's."""
    mine, ram = answers[0], ram_words(answers[0].hardware)
    yours = f"your {mine.hardware.name}"
    if mine.best is None and alt is None:
        return _none_runs(answers, ram)
    if alt is None:
        said = f"{_upper(yours)} runs it at {ram}" + (
            "; none of the other cards does" if len(answers) > 1 else "; no other card is compared"
        )
        return said + _streaming(mine) + "."
    if mine.best is None:
        p = alt.best.prediction
        return (
            f"{_upper(yours)} runs nothing at {ram}; the {alt.hardware.name} runs it at {p.decode_tps:.1f} t/s"
            f"{_streaming(alt)}."
        )
    if mine.streaming_note is not None and mine.streaming_note == alt.streaming_note:
        return f"{_compared(mine, alt, ram)}; both {mine.streaming_note.replace('streams its', 'stream their', 1)}."
    return _compared(mine, alt, ram) + _streaming(mine) + _streaming(alt) + "."


def _compared(mine: CardAnswer, alt: CardAnswer, ram: str) -> str:
    a, b = mine.best.prediction, alt.best.prediction
    yours, than = f"your {mine.hardware.name}", f"the {alt.hardware.name}"
    close = range_verdict(a.decode_tps_range, b.decode_tps_range) == TOO_CLOSE
    faster = round(100 * (b.decode_tps / a.decode_tps - 1))
    first, second = (b, a) if faster >= 0 else (a, b)  # the faster card's range first
    both = f"{_range(first)} against {_range(second)} t/s"
    if faster > 0:
        said = f"The {alt.hardware.name} is {faster} % faster than {yours} at {ram}"
    elif faster < 0:
        said = f"{_upper(yours)} is {round(100 * (a.decode_tps / b.decode_tps - 1))} % faster than {than} at {ram}"
    else:
        said = f"{_upper(yours)} and {than} are as fast at {ram}"
    if close:
        return f"{said}, but the two are too close to call: their ranges overlap ({both})"
    return f"{said}, and the ranges are apart ({both}): the difference is more than the prediction's error"


def _range(p) -> str:
    return f"{p.decode_tps_range[0]:.1f}-{p.decode_tps_range[1]:.1f}"


def _streaming(answer: CardAnswer) -> str:
    return f"; the {answer.hardware.name} {answer.streaming_note}" if answer.streaming_note else ""


def _upper(text: str) -> str:
    return text[0].upper() + text[1:]


def _none_runs(answers: Sequence[CardAnswer], ram: str) -> str:
    n = len(answers)
    who = "neither card fits" if n == 2 else f"none of the {n} cards fits"
    who = f"your {answers[0].hardware.name} does not fit" if n == 1 else who
    needs = [(c.ram_gib, a.hardware.name) for a in answers for c in a.advice.would_fit if c.kind == "ram" and c.ram_gib]
    if not needs:
        return f"{_upper(who)} {ram}: {answers[0].advice.summary}."
    gib, name = min(needs)
    return f"{_upper(who)} {ram}: {gib} GiB of RAM would let the {name} run."


def fit_lines(answers: Sequence[CardAnswer]) -> list[str]:
    """What would let each card run or end its streaming from disk, the cards that need the same on one line
    ('Every card: ...' where all of several do: they share the user's host)."""
    groups: dict[str, list[str]] = {}
    for a in answers:
        if a.fit_line:
            groups.setdefault(a.fit_line.removeprefix(f"{a.hardware.name}: "), []).append(a.hardware.name)
    every = len(answers) > 1
    return [
        f"{'Every card' if every and len(names) == len(answers) else ', '.join(names)}: {text}"
        for text, names in groups.items()
    ]
