"""Each policy declares its own knobs (policies/knobs.py); nothing outside moe_model/policies/ special-cases a
policy by name, and the CPU share's two spellings are one knob."""

from __future__ import annotations

import ast
import json
import re

import pytest
from conftest import QWEN30B, ROOT

from moe_model.cli.main import main
from moe_model.errors import MoeModelError
from moe_model.policies import POLICIES
from moe_model.policies.knobs import FLAG_KNOBS, parse_knobs
from moe_model.speed.scenario import Scenario

POLICY_NAMES = {"CPU_SHARE", "CLASS_LRU", *(repr(name) for name in POLICIES)}


def _name_comparisons(tree: ast.AST) -> list[int]:
    """Lines comparing against a policy's name constant or literal (==, !=, in)."""
    out = []
    for node in ast.walk(tree):
        if isinstance(node, ast.Compare):
            sides = [node.left, *node.comparators]
            named = [s for s in sides if isinstance(s, ast.Name) and s.id in POLICY_NAMES]
            literal = [s for s in sides if isinstance(s, ast.Constant) and repr(s.value) in POLICY_NAMES]
            out += [node.lineno] if named or literal else []
    return out


def test_the_comparison_finder_catches_a_name_test():
    assert _name_comparisons(ast.parse("x = 1 if name == CPU_SHARE else 0")) == [1]
    assert _name_comparisons(ast.parse("y = p != 'static-hot-set'")) == [1]
    assert _name_comparisons(ast.parse("z = name == REFERENCE")) == []


def test_no_module_outside_the_policies_compares_a_policy_name():
    outside = [p for p in (ROOT / "moe_model").rglob("*.py") if "policies" not in p.parts]
    found = {p.name: lines for p in outside if (lines := _name_comparisons(ast.parse(p.read_text())))}
    assert found == {}


def test_the_flag_knobs_are_the_registrys_knobs_that_have_a_llama_cpp_flag():
    declared = {k for p in POLICIES.values() for k in p.declared if k.llama_flag}
    assert declared == set(FLAG_KNOBS)


def test_a_scenarios_knobs_are_checked_against_its_policys_declaration():
    assert Scenario(knobs=(("clock", "group"),)).policy_knobs == {"clock": "group"}  # mainline: ClassLRU's
    with pytest.raises(MoeModelError, match="clock must be one of"):
        Scenario(knobs=(("clock", "hour"),))
    with pytest.raises(MoeModelError, match="is a knob of lazy-unload, not of belady"):
        Scenario(policy="belady", knobs=(("idle_rounds", 2),))
    with pytest.raises(MoeModelError, match="given twice"):
        Scenario(knobs=(("share", 0.5), ("share", 0.8)))
    one, other = Scenario(knobs=(("share", 0.8),)), Scenario(knobs=[("share", 0.8)])
    assert one == other and hash(one) == hash(other)  # a cache key in the app


def test_cpu_share_is_the_share_knobs_other_spelling_on_every_command(capsys):
    assert parse_knobs(["share=0.8", "clock=group"]) == {"share": 0.8, "clock": "group"}
    base = ["predict", "--model", str(QWEN30B), "--hardware", "t4"]
    outs = []
    for extra in (["--cpu-share", "0.8"], ["--knob", "share=0.8"]):
        assert main([*base, "--budget-mib", "2000", "--hit-rate", "0.9", "--json", *extra]) == 0
        outs.append(json.loads(capsys.readouterr().out)["scenario"])
    assert outs[0] == outs[1] and outs[0]["cpu_share"] == 0.8 and outs[0]["knobs"] == {"share": 0.8}


@pytest.mark.parametrize(
    ("knobs", "policy", "said"),
    [
        ((("ms_per_round", -1.0),), "lazy-unload", "knob ms_per_round must be >= 0, got -1"),  # a bound on one side
        ((("idle_rounds", 1e308),), "lazy-unload", "knob idle_rounds must be in [0, 1e+09], got 1e+308"),  # issue 39
        ((("share", "abc"),), "", "--moe-cache-cpu-share (--knob share) takes a number, got 'abc'"),  # no --policy
        ((("profile", "foo"),), "static-hot-set", "knob profile is the workload"),  # a workload, not typed
    ],
)
def test_a_bad_knob_value_is_one_clear_line(knobs, policy, said):
    with pytest.raises(MoeModelError, match=re.escape(said)):
        Scenario(budget_mib=6000, policy=policy, knobs=knobs)


def test_a_cpu_share_of_0_on_the_named_cpu_share_policy_is_0_not_its_default():
    """`--policy cpu-share-b12191 --cpu-share 0` runs the share 0 (as simulate does), not the policy's default."""
    assert Scenario(budget_mib=6000, policy="cpu-share-b12191", knobs=(("share", 0.0),)).policy_knobs == {"share": 0}
    assert Scenario(budget_mib=6000, policy="cpu-share-b12191").policy_knobs == {"share": 0.5}  # named without one
    assert Scenario(budget_mib=6000, knobs=(("share", 0.0),)).knobs == ()  # unnamed, 0 is no share at all


def test_a_build_before_the_cpu_share_compares_every_policy_but_the_cpu_shares():
    from moe_model.policies import available_at

    assert "cpu-share-b12191" not in available_at(12180) and "class-lru-b12170" in available_at(12180)
    assert set(available_at(12569)) == set(POLICIES)


def test_simulate_checks_a_knobs_value_against_its_policys_declaration_as_predict_does(capsys):
    """`simulate --policy cpu-share-b12191 --knob share=1.5` is refused, as predict refuses it (it ran before)."""
    args = ["--model", str(QWEN30B), "--budget-mib", "4000", "--policy", "cpu-share-b12191", "--knob", "share=1.5"]
    for command in (["simulate", "--synthetic", "--tokens", "200"], ["predict", "--hardware", "t4"]):
        assert main([*command, *args]) != 0
        assert "must be in [0, 1], got 1.5" in capsys.readouterr().err, command


def test_a_round_time_near_zero_waits_at_most_max_idle_rounds_not_an_overflow():
    """Issue 39: `--knob ms_per_round=1e-300` (the cooldown over it) ended in `unexpected OverflowError`."""
    from moe_model.limits import MAX_IDLE_ROUNDS
    from moe_model.policies.lazy_unload import idle_limit

    assert idle_limit(3, 500.0, 50.0) == 10 and idle_limit(3, 500.0, 0.0) == 3  # positive controls
    assert idle_limit(3, 500.0, 1e-300) == idle_limit(MAX_IDLE_ROUNDS, 1e9, 1.0) == MAX_IDLE_ROUNDS
