"""How the headline draws a setting's usability (the box's colour follows the word, success only when usable) and its
sentences (the figures the cards show, each with its badge)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from moe_model.answers.basis import SYNTHETIC, prediction_basis
from moe_model.answers.headline import headline_figures
from moe_model.answers.usability import SLOW, UNUSABLE, USABLE, Usability
from moe_model.fits.calibration import default_time_model
from moe_model.pricing.curve import curve
from moe_model.readers.model_spec import load_model
from moe_model.speed.hardware import PRESETS
from moe_model.speed.scenario import Scenario
from ui.headline import details, usability_box

T4 = PRESETS["Tesla T4"]


class Box:
    """Records which kind of box was drawn and its text."""

    def __init__(self):
        self.drawn = []

    def __getattr__(self, kind):
        return lambda text: self.drawn.append((kind, text))


@pytest.mark.parametrize(("word", "kind"), [(USABLE, "success"), (SLOW, "warning"), (UNUSABLE, "error")])
def test_only_a_usable_setting_is_a_success_box(word, kind):
    box = Box()
    why = () if word == USABLE else ("0.1 t/s decode is below 2 t/s",)
    usability_box(box, "**At 10 MiB**:", Usability(word, why, "" if word == USABLE else "more RAM"), "modelled")
    ((drawn, text),) = box.drawn
    assert drawn == kind and text.startswith(f"**At 10 MiB**: This setting is {word}")
    assert (":orange-badge[modelled]" in text) == (word != USABLE)  # a quoted figure carries its badge


@pytest.fixture(scope="module")
def t4():
    """Qwen3-30B on a T4 at 10,000 MiB with a given hit rate (no replay: quick), and its basis."""
    model = load_model("sample_data/models/Qwen3-30B-A3B-Q4_K_M.gguf")
    tm = default_time_model()
    pred = curve(model, T4, tm.params, Scenario(budget_mib=10_000), [10_000], hit_rate=0.9, ranges=tm.ranges())
    pred = pred.at(10_000).prediction
    return pred, prediction_basis(SYNTHETIC, pred.scenario, T4, rel_error=tm.rel_error, prefill_rel_error=0.2)


def test_the_details_quote_the_cards_prompt_figures_computed_once(t4):
    """The cards and the sentence read one computation (answers.headline): the sentence takes the cards' figures."""
    pred, basis = t4
    figures = headline_figures(pred, basis, 0.2)
    _, prompt, ttft, _ = figures
    said = details(pred, figures, "the cache helps", basis)
    assert (
        f"tokens {prompt.value} t/s ({prompt.range}) :orange-badge[modelled], first token after {ttft.value} s " in said
    )
    other = (figures[0], replace(prompt, value="7", range=""), replace(ttft, value="9.00", range=""), figures[3])
    assert "tokens 7 t/s :orange-badge[modelled], first token after 9.00 s :orange-badge" in details(
        pred, other, "the cache helps", basis
    )
