"""How the headline draws a setting's usability: the box's colour follows the word, success only when usable."""

from __future__ import annotations

import pytest

from moe_model.answers.usability import SLOW, UNUSABLE, USABLE, Usability
from ui.headline import usability_box


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
