"""The badge that says how a number is known (answers.basis's four words), drawn the same on every page."""

from __future__ import annotations

from moe_model.answers.basis import CALIBRATED, MEASURED, MODELLED, REPLAYED

# colour per basis: the closer to the user's own run, the greener
_COLOURS = {MEASURED: "green", REPLAYED: "blue", CALIBRATED: "violet", MODELLED: "orange"}


def badge(word: str) -> str:
    """Markdown for a basis word as a Streamlit badge, e.g. ':green-badge[measured]' (any other word: grey)."""
    return f":{_COLOURS.get(word, 'gray')}-badge[{word}]"
