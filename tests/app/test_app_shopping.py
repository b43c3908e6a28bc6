"""Shopping answers for the user's own card first (issue 38), through Streamlit's AppTest: Qwen3-235B, an RTX 4080
in the sidebar and 64 GiB of RAM."""

from __future__ import annotations

import re

from streamlit.testing.v1.element_tree import Block
from test_app import open_page

QWEN235 = "Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf"
EGPU = "eGPU RTX 4090, PCIe 3.0 x4"


def test_the_page_opens_with_your_card_and_the_best_alternative_each_with_t_s_and_prices_the_egpu_on_its_link():
    cards = f"RTX 4080 16GB;RTX 4090;RTX 5090;{EGPU}"
    at = open_page("pages/shopping.py", model=QWEN235, gpu="RTX 4080 16GB", ram="64", cards=cards)
    assert not at.exception
    shown = [e for e in at.main if not isinstance(e, Block)]
    assert shown[0].type == "header" and shown[1].type == "warning"  # the lead, first; 1.1 t/s: never a success
    lead = shown[1].value
    rows = at.dataframe[0].value.set_index("GPU")
    alt = rows.drop(index="RTX 4080 16GB")["decode t/s"].idxmax()
    for name, who in (("RTX 4080 16GB", "Your "), (alt, "; best alternative ")):
        tps, span = rows.loc[name, "decode t/s"], rows.loc[name, "decode range t/s"].replace("–", "-")
        assert f"{who}{name}: {tps:.1f} t/s decode (range {span}) :orange-badge[modelled]" in lead, name
    assert re.search(rf"The {alt} is \d+ % faster than your RTX 4080 16GB at 64 GiB of RAM, ", lead)
    assert "too close to call: their ranges overlap" in lead or "the ranges are apart" in lead
    assert "This setting is unusable: " in lead and "GiB of RAM, so the experts stay in memory" in lead
    # no measured row of a comparable Qwen3 (its rows are the 30B's): no nearest row is put beside the lead
    assert not [e for e in shown if e.type == "caption" and "Nearest measured row" in e.value]
    # the table: decode beside the card with its range and basis, nothing empty shown
    order = list(at.dataframe[0].proto.column_order)
    assert order[:4] == ["GPU", "decode t/s", "decode range t/s", "decode is"] and "what would fit" not in order
    # the eGPU on its own link: not the desktop 4090's numbers
    assert rows.loc[EGPU, "link"] == "PCIe 3.0 x4" and rows.loc["RTX 4090", "link"] == "PCIe 4.0 x16"
    assert rows.loc[EGPU, "decode t/s"] != rows.loc["RTX 4090", "decode t/s"]
