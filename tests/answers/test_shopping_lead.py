"""Shopping's lead (issue 38): the user's card first with its decode speed and range, the best alternative with its
own, a verdict with a verb; the user's slow or unusable setting said with what would help; the nearest measured row."""

from __future__ import annotations

import pytest
from conftest import QWEN235B_SHARD1

from moe_model.answers.fit_advice import card_answer
from moe_model.answers.nearest_row import nearest_row
from moe_model.answers.recommend import recommend
from moe_model.answers.shopping_lead import fit_lines, shopping_lead
from moe_model.answers.usability import UNUSABLE, USABLE, usability
from moe_model.fits.calibration import default_time_model
from moe_model.pricing.workloads import synthetic_workload
from moe_model.readers.model_spec import load_model
from moe_model.speed.hardware import preset
from moe_model.speed.scenario import Scenario
from moe_model.speed.time_model import range_verdict


@pytest.fixture(scope="module")
def qwen235b():
    return load_model(QWEN235B_SHARD1)


def _answers(model, ram_gib: float, *cards: str, vram_gib: float | None = None):
    """Each card in a host of `ram_gib`, ranked by recommend on a short synthetic workload with the default time
    model's ranges (the page's own path); the first card is the user's (of `vram_gib` where given)."""
    work = synthetic_workload(model, Scenario(), n_tokens=400)
    tm = default_time_model()
    ranges = tm.ranges((0.0, 0.0))
    out = []
    for i, name in enumerate(cards):
        hw = preset(name).with_changes(ram_gib=ram_gib, **({"vram_gib": vram_gib} if vram_gib and not i else {}))
        out.append(card_answer(model, hw, recommend(model, hw, tm.params, Scenario(), lambda sc: work, "m.gguf",
                                                    ranges)))  # fmt: skip
    return out


def _said(p) -> str:
    lo, hi = p.decode_tps_range
    return f"{p.decode_tps:.1f} t/s decode (range {lo:.1f}-{hi:.1f}) [modelled]"


def test_the_lead_names_your_card_first_with_its_speed_and_range_then_the_fastest_other_card_and_a_verdict(qwen235b):
    """Issue 38's case: Qwen3-235B, an RTX 4080 in the sidebar, 64 GiB. The verdict compared the 5090 with the 4090
    and never named the 4080 nor a speed."""
    answers = _answers(qwen235b, 64.0, "RTX 4080 16GB", "RTX 4090", "RTX 5090")
    mine = answers[0].best.prediction
    alt = max(answers[1:], key=lambda a: a.best.prediction.decode_tps)
    other = alt.best.prediction
    lead = shopping_lead(qwen235b.name, answers, ["modelled"] * 3)
    assert lead.figures() == (
        f"Your RTX 4080 16GB: {_said(mine)}; best alternative {alt.hardware.name}: {_said(other)}"
    )
    faster = round(100 * (other.decode_tps / mine.decode_tps - 1))
    assert faster > 0 and lead.verdict.startswith(
        f"The {alt.hardware.name} is {faster} % faster than your RTX 4080 16GB at 64 GiB of RAM, "
    )
    close = range_verdict(mine.decode_tps_range, other.decode_tps_range) == "too close to call"
    assert ("too close to call: their ranges overlap" in lead.verdict) == close
    assert ("the ranges are apart" in lead.verdict) == (not close)
    # 1.1 t/s streaming from disk: unusable, said with the RAM that would end the streaming; never a success
    assert usability(mine).word == UNUSABLE and lead.warns
    assert lead.lines()[-1] == usability(mine).tagged("[modelled]") and "GiB of RAM" in usability(mine).remedy
    assert lead.lines()[1] == f"[modelled] {lead.verdict}"  # every figure of the lead with its basis
    assert "both stream their experts from disk (" in lead.verdict
    # no measured row of a comparable Qwen3 (the 30B rows are 8x smaller): none is put beside it
    assert lead.nearest is nearest_row(qwen235b.name, mine.scenario, answers[0].hardware) is None
    assert lead.nearest_line == ""
    needed = answers[0].best.host.needed_gib  # one host, one RAM: every card streams until the same RAM
    assert fit_lines(answers) == [f"Every card: streams its experts from disk ({needed} GiB of RAM would end it)"]


def test_where_your_card_is_the_fastest_the_verdict_says_by_how_much_and_a_usable_setting_does_not_warn(qwen30b):
    answers = _answers(qwen30b, 128.0, "RTX 4090", "RTX 4080 16GB", "Tesla T4")
    mine, alt = answers[0].best.prediction, answers[1].best.prediction  # the 4080 outruns the T4
    lead = shopping_lead(qwen30b.name, answers, ["calibrated", "modelled", "modelled"])
    assert lead.figures(lambda word: f"<{word}>").startswith(f"Your RTX 4090: {mine.decode_tps:.1f} t/s decode")
    assert "<calibrated>; best alternative RTX 4080 16GB: " in lead.figures(lambda word: f"<{word}>")
    faster = round(100 * (mine.decode_tps / alt.decode_tps - 1))
    assert lead.verdict.startswith(f"Your RTX 4090 is {faster} % faster than the RTX 4080 16GB at 128 GiB of RAM, ")
    assert usability(mine).word == USABLE and not lead.warns and len(lead.lines()) == 2
    assert lead.lines(lambda word: f"<{word}>")[1] == f"<calibrated> <modelled> {lead.verdict}"  # both cards' words
    assert lead.nearest_line.startswith("Nearest measured row: Qwen3-30B-A3B on ")  # the model's own measured row


def test_when_no_card_runs_the_verdict_names_the_least_ram_that_lets_one_run(qwen235b):
    """2 GiB leaves no page cache beside the reserve: not even mmap'd experts run."""
    answers = _answers(qwen235b, 2.0, "RTX 4080 16GB", "RTX 4090")
    needs = {a.hardware.name: min(c.ram_gib for c in a.advice.would_fit if c.kind == "ram") for a in answers}
    least = min(needs, key=needs.get)
    lead = shopping_lead(qwen235b.name, answers, ["modelled"] * 2)
    assert lead.verdict == f"Neither card fits 2 GiB of RAM: {needs[least]} GiB of RAM would let the {least} run."
    assert lead.figures().startswith("Your RTX 4080 16GB: nothing runs (") and lead.alternative is None
    assert f"{needs['RTX 4080 16GB']} GiB of RAM" in lead.figures() and lead.warns and lead.usability is None
    assert lead.figures().endswith(") [modelled]")  # what would fit: the memory model's figure, tagged
    assert [line.split(": ", 1)[0] for line in fit_lines(answers)] == ["RTX 4080 16GB", "RTX 4090"]  # each its own


def test_when_only_the_alternative_runs_the_verdict_says_your_card_runs_nothing_and_the_others_speed(qwen30b):
    answers = _answers(qwen30b, 3.0, "Tesla T4", "RTX 5090", "RTX 4090", vram_gib=1.0)
    running = [a for a in answers[1:] if a.best]
    assert answers[0].best is None and running  # a T4 of 1 GiB holds no layer; the 32 GB card holds the model
    fastest = max(running, key=lambda a: a.best.prediction.decode_tps)
    lead = shopping_lead(qwen30b.name, answers, ["modelled"] * 3)
    p = fastest.best.prediction
    assert lead.verdict.startswith(
        f"Your Tesla T4 runs nothing at 3 GiB of RAM; the {fastest.hardware.name} runs it at {p.decode_tps:.1f} t/s"
    )
    assert lead.alternative.name == fastest.hardware.name and lead.warns


def test_your_card_alone_is_compared_with_nothing_and_still_named_with_its_speed(qwen30b):
    (answer,) = _answers(qwen30b, 128.0, "RTX 4090")
    lead = shopping_lead(qwen30b.name, [answer], ["modelled"])
    assert lead.alternative is None and lead.figures().startswith("Your RTX 4090: ")
    assert lead.verdict == "Your RTX 4090 runs it at 128 GiB of RAM; no other card is compared."
