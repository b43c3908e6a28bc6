"""Visitor text is text (issue 39): what a link or an uploaded header says reaches the page as literal, cut text,
never as a live link, a remote image or HTML (AppTest: the markdown bodies the browser would render)."""

from __future__ import annotations

import re

import pytest
from gguf import GGMLQuantizationType as T
from hostile_csv import hostile_csvs
from test_app import open_page, upload_header

from moe_model.readers.gguf_writer import header_bytes

LINKS = "[click here](http://evil.example/gpu) ![t](http://evil.example/g.png)"
HTML = '<img src="http://evil.example/x.png"><a href="http://evil.example">x</a> www.evil.example'
LONG = "x" * 20_000
HOSTILE = {"markdown": LINKS, "html": HTML, "long": LONG}


def live_markup(body: str) -> list[str]:
    """What would render as a link, an image, an autolink or HTML: the marks left once escaped characters go."""
    bare = re.sub(r"\\.", "", body)
    return [mark for mark in ("](", "![", "<", "://", "www.") if mark in bare]


def bodies(at) -> list[str]:
    """Every markdown body on the page and in the sidebar: messages, captions, markdown, expander labels."""
    kinds = ("markdown", "caption", "warning", "error", "info", "success")
    return [e.value for kind in kinds for e in at.get(kind)] + [e.label for e in at.get("expander")]


def assert_literal(at) -> None:
    assert not at.exception, [e.value for e in at.exception]
    found = [b for b in bodies(at) if "evil" in b or "xxxxxxxxxx" in b]
    assert found, "the hostile text is not echoed anywhere: nothing was checked"
    for body in found:
        assert not live_markup(body), body
        assert len(body) < 1_000, len(body)  # the echo is cut


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_links_gpu_is_echoed_as_literal_cut_text_in_one_warning(kind):
    at = open_page("pages/model_budget.py", gpu=HOSTILE[kind])
    assert_literal(at)
    assert len([w for w in at.sidebar.warning if "The link's gpu" in w.value]) == 1
    assert at.sidebar.selectbox(key="gpu").value == "Tesla T4"  # the rest of the sidebar stands


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_links_model_is_echoed_as_literal_cut_text(kind):
    at = open_page("pages/model_budget.py", model="upload:abc:" + HOSTILE[kind])
    assert_literal(at)


@pytest.mark.parametrize("kind", ["markdown", "long"])
def test_a_links_model_path_that_does_not_read_is_echoed_as_literal_cut_text(kind):
    at = open_page("pages/model_budget.py", model="/nowhere/" + HOSTILE[kind])
    assert_literal(at)


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_links_cpu_model_is_echoed_as_literal_cut_text(kind):
    at = open_page("pages/model_budget.py", cpu_model=HOSTILE[kind])
    assert_literal(at)


@pytest.mark.parametrize("kind", HOSTILE)
def test_a_links_number_setting_is_echoed_as_literal_cut_text(kind):
    at = open_page("pages/model_budget.py", ram=HOSTILE[kind])
    assert_literal(at)


def hostile_header(name: str) -> bytes:
    meta = {
        "general.architecture": "qwen3moe",
        "general.name": name,
        "qwen3moe.block_count": 2,
        "qwen3moe.expert_count": 8,
        "qwen3moe.expert_used_count": 2,
        "qwen3moe.embedding_length": 256,
    }
    tensors = [(f"blk.{il}.ffn_down_exps.weight", T.Q4_K, [256, 64, 8]) for il in range(2)]
    return header_bytes(meta, tensors)


@pytest.mark.parametrize("kind", HOSTILE)
def test_an_uploaded_headers_name_is_shown_as_literal_cut_text(kind):
    at = open_page("pages/model_budget.py")
    upload_header(at, hostile_header(HOSTILE[kind]))
    at.run()
    assert_literal(at)
    assert any(c.value.startswith("Model:") for c in at.caption)


def test_a_hostile_trace_upload_is_one_line_naming_nothing_live_and_the_page_stands(tmp_path):
    """The 10^7-column CSV under a hostile file name: refused in one line (issue 39) and the name is kept as text."""
    data = hostile_csvs(tmp_path)["10^7 columns"].read_bytes()
    at = open_page("pages/explore.py")
    at.radio(key="workload").set_value("upload a trace").run()
    at.get("file_uploader")[0].set_value((f"{LINKS}.csv", data, "text/csv"))
    at.run()
    assert not at.exception and len(at.error) == 1 and "column" in at.error[0].value
    at.run()  # the sidebar, drawn before the page kept the upload, names it from the next run
    assert_literal(at)
    assert at.sidebar.selectbox(key="gpu").value == "Tesla T4"
