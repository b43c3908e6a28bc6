"""The sidebar's host as people know it and the range it narrows, on Explore (AppTest, below the browser)."""

from __future__ import annotations

from test_app import open_page, range_rows


def _widest(at) -> str:
    return next(c.value for c in at.caption if "Widest source" in c.value)  # after the range's basis badge


def test_a_described_ram_kit_leaves_the_range_and_a_bad_one_is_one_warning():
    at = open_page("pages/explore.py", gpu="RTX 3060 12GB")
    assert not at.exception and any(r.startswith("host: RAM kit: ") for r in range_rows(at)) and _widest(at)
    at.sidebar.text_input(key="host_ram_kit").set_value("2x32 GB DDR5-6000").run()
    assert not at.exception and not any(r.startswith("host: RAM kit") for r in range_rows(at))
    assert at.query_params["ram_kit"] == "2x32 GB DDR5-6000"
    at.sidebar.text_input(key="host_ram_kit").set_value("lots of fast ram").run()
    warnings = [w.value for w in at.sidebar.warning if w.value.startswith("RAM kit")]
    assert not at.exception and len(warnings) == 1 and "as on the box" in warnings[0]


def test_explore_prices_a_model_whose_mmapd_experts_exceed_ram_and_says_it_streams_from_disk():
    # 48 GiB: a RAM the user states (the preset's own 64 is an assumption and is never priced: host_memory)
    at = open_page("pages/explore.py", model="Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf", gpu="RTX 4090", ram="48")
    assert not at.exception
    assert any("page from disk" in w.value for w in at.warning)
    said = [m.value for m in (*at.markdown, *at.caption, *at.info) if "GiB per token from disk" in m.value]
    assert said and any("t/s decode" in m.value for m in at.markdown)


def test_an_unknown_cpu_is_one_warning_naming_the_apps_box_not_the_clis_flags():
    at = open_page("pages/model_budget.py")
    at.sidebar.text_input(key="host_cpu_model").set_value("Pentium 4 HT").run()
    (said,) = [w.value for w in at.sidebar.warning if w.value.startswith("CPU model")]
    assert "unknown CPU" in said and "nearest" in said and "CPU threads (-t)" in said and not at.exception
    assert "--threads" not in said and "--cpu-ghz" not in said  # issue 38: CLI flags inside the app
