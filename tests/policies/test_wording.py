"""policies.wording: "exact" only for the policy a build runs when it is a transcription; "modelled" otherwise;
a policy the build does not run is said to be one. Explore and the CLI's text output take these words."""

from __future__ import annotations

import pytest
from conftest import GROUNDTRUTH, GT_HEADER, MIXTRAL

from moe_model.cli.main import main
from moe_model.llama.builds import MAINLINE_BUILD
from moe_model.policies import CLASS_LRU, CPU_SHARE, REFERENCE
from moe_model.policies.wording import hit_rate_wording

EXACT_SENTENCE = "Hit rates are simulated exactly as llama.cpp b11549's cache would serve the workload"


def test_the_plain_lru_of_its_builds_is_exact():
    words = hit_rate_wording(REFERENCE, 11549)
    assert (words.how, words.tag) == ("exact", "lru-b11549 (exact)")
    assert words.line == "Hit rates: lru-b11549 (exact), llama.cpp b11549."
    assert words.sentence.startswith(EXACT_SENTENCE)


@pytest.mark.parametrize(("policy", "share"), [(CLASS_LRU, 0.0), (CPU_SHARE, 0.5)])
def test_class_lru_and_the_cpu_share_are_modelled_never_exact(policy, share):
    words = hit_rate_wording(policy, 12569, share)
    assert words.how == "modelled" and words.tag == f"{policy} (modelled)"
    assert words.sentence.startswith(f"Hit rates are modelled: {policy}, our reading of the policy llama.cpp b12569")
    assert "exactly" not in words.sentence and "exact)" not in words.line


@pytest.mark.parametrize(("policy", "runs"), [(REFERENCE, CLASS_LRU), ("belady", CLASS_LRU)])
def test_a_policy_the_build_does_not_run_is_never_worded_as_its_cache(policy, runs):
    words = hit_rate_wording(policy, 12569)
    assert words.how == "exact"  # a transcription, but not of what b12569 runs
    assert words.sentence == f"Hit rates are {policy}'s (exact), not the policy llama.cpp b12569 runs ({runs})"


def test_a_build_before_the_cache_is_said_to_have_none_and_what_a_cache_takes():
    words = hit_rate_wording(REFERENCE, 11000)
    assert words.sentence.startswith("llama.cpp b11000 has no MoE cache: --moe-cache-mib came in b11480, so a cache ")
    assert "takes b11480 or later" in words.sentence and "b11000's cache" not in words.sentence
    assert words.line == "llama.cpp b11000 has no MoE cache (it came in b11480); hit rates: lru-b11549 (exact)."


def _cli_text(capsys, *args: str) -> str:
    assert main(list(args)) == 0
    return capsys.readouterr().out


def test_predicts_text_output_says_exact_only_at_a_plain_lru_build(capsys):
    args = ("predict", "--model", str(MIXTRAL), "--hardware", "rtx 4090", "--budget-mib", "3000")
    old = _cli_text(capsys, *args, "--build", "11549")
    new = _cli_text(capsys, *args)  # the default build, mainline: ClassLRU
    assert "  Hit rates: lru-b11549 (exact), llama.cpp b11549." in old.splitlines()
    assert f"  Hit rates: class-lru-b12170 (modelled), llama.cpp b{MAINLINE_BUILD}." in new.splitlines()
    assert "exact" not in new.replace("(a model, not a measurement)", "")


def test_simulates_text_output_opens_with_the_policys_own_words(capsys):
    args = ("simulate", "--model", str(GT_HEADER), "--trace", str(GROUNDTRUTH / "traces" / "b25.npz"))
    old = _cli_text(capsys, *args, "--budget-mib", "403", "--build", "11549")
    new = _cli_text(capsys, *args, "--budget-mib", "403")
    assert old.startswith(EXACT_SENTENCE + " (lru-b11549, a transcription of its code); policy source: llama.cpp")
    assert new.startswith(
        f"Hit rates are modelled: class-lru-b12170, our reading of the policy llama.cpp b{MAINLINE_BUILD}"
    )
    assert "exactly" not in new.splitlines()[0]
