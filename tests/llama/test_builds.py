"""Build names as users give them: numbers, bNNNNN tags and llama.cpp's named releases."""

from __future__ import annotations

import json

import pytest
from cli_runs import run_cli
from conftest import GT_HEADER

from moe_model.errors import MoeModelError
from moe_model.llama.builds import (
    CLASS_LRU_BUILD,
    CPU_SHARE_BUILD,
    FIRST_CACHE_BUILD,
    GRAPH_RESERVE_BUILD,
    parse_build,
    uses_class_lru,
)


def test_a_number_and_a_b_tag_are_the_same_build():
    assert parse_build("12569") == parse_build(" b12569 ") == 12569


def test_v1_0_0_is_read_as_the_earliest_build_it_can_be_between_b12352_and_b12375():
    build = parse_build("v1.0.0")
    assert parse_build("1.0.0") == parse_build("V1.0.0") == build == 12353
    assert 12352 < build < 12375
    # every rule of builds.py answers the same anywhere in that interval: no rule's first build falls inside it
    rules = (FIRST_CACHE_BUILD, CLASS_LRU_BUILD, CPU_SHARE_BUILD, GRAPH_RESERVE_BUILD)
    assert uses_class_lru(build) and not any(12353 < first <= 12374 for first in rules)


@pytest.mark.parametrize("text", ["v0.3.0", "v1.2.0", "2.0.0"])
def test_a_named_release_whose_build_is_not_known_is_refused_in_one_line(text):
    with pytest.raises(MoeModelError, match=r"is not mapped to a build number here \(known: v1.0.0\)") as err:
        parse_build(text)
    assert "\n" not in str(err.value)


def test_a_malformed_build_is_refused_naming_the_forms_taken():
    with pytest.raises(MoeModelError, match="12569, b12569 or a named release"):
        parse_build("v1.0")


def test_predict_takes_build_v1_0_0_and_prices_its_classlru():
    args = ("--model", str(GT_HEADER), "--hardware", "h200", "--budget-mib", "2000", "--build", "v1.0.0", "--json")
    out = run_cli("predict", *args)
    assert out.returncode == 0, out.stderr
    report = json.loads(out.stdout)
    assert report["build"] == 12353 and report["policy"] == "class-lru-b12170"
