"""Every default in one place: the CLI flags, URL keys, widget ranges and fit tables generated from the settings
declared on the dataclass fields (moe_model.settings), and nothing re-declared by a page or the CLI."""

from __future__ import annotations

import argparse
import math
import re

import pytest
from conftest import ROOT

from moe_model.cli.main import build_parser
from moe_model.errors import MoeModelError
from moe_model.limits import MAX_CONCURRENCY
from moe_model.llama.slot_plan import Placement
from moe_model.settings import settings_of
from moe_model.speed.hardware import MACHINE_SETTINGS, Hardware, preset
from moe_model.speed.host import Host
from moe_model.speed.rates import DECODE_PARAMS, PARAM_BOUNDS, PREFILL_PARAMS, PRIOR_WIDTH, TimeParams
from moe_model.speed.scenario import Scenario
from moe_model.workload import Batching

PLACEMENT_FLAGS = {"--placement", "--cpu-moe", "--n-cpu-moe", "--n-gpu-layers", "-ngl", "--tensor-split", "-ts"}
MACHINE_FLAGS = {"--vram-gib", "--gpu-bw-gbs", "--pcie-gen", "--pcie-lanes", "--cpu-bw-gbs", "--threads"}
MACHINE_FLAGS |= {"--pinned-gbs", "--pageable-gbs", "--ram-gib"}
MACHINE_FLAGS |= {"--mem-channels", "--mem-mts", "--cpu-ghz", "--cpu-family", "--vm", "--host-copy-gbs", "--disk-gbs"}
SERVING_FLAGS = {"--concurrency", "--draft", "--accept", "--cpu-share", "--ctx", "--prompt-tokens", "--ubatch-size"}
SERVING_FLAGS |= {"-ub", "--load-mode", "--pinned", "--cache-type-k", "-ctk", "--cache-type-v", "-ctv"}
SERVING_FLAGS |= {"--fit-target-mib", "--offload-min-batch", "--n-gpu-layers", "-ngl", "--tensor-split", "-ts"}
SERVING_FLAGS |= {"--depth", "--flash-attn", "-fa", "--no-kv-offload", "--n-predict"}  # the request
SERVING_FLAGS |= {"--build"}
GENERATED_FLAGS = {  # per subcommand, the flags generated from a declared setting
    "plan": {"--budget-mib", *PLACEMENT_FLAGS},
    "simulate": {"--budget-mib", *PLACEMENT_FLAGS, "--concurrency", "--draft", "--accept", "--prompt-tokens"}
    | {"--replay-prompt-tokens"}
    | {"--ubatch-size", "-ub", "--seed", "--policy", "--build", "--cpu-share"},
    "predict": MACHINE_FLAGS | SERVING_FLAGS | {"--placement", "--cpu-moe", "--n-cpu-moe", "--budget-mib", "--policy"},
    "recommend": MACHINE_FLAGS | SERVING_FLAGS,
    "parse-log": {"--build"},  # for logs that name none
    "calibrate": {"--build"},
    "record": {"--ubatch-size", "-ub", "--threads", "--build"},
}
URL_KEYS = {  # the app's URL keys of declared settings, with their widget's (lo, hi, step) or options
    "budget": (0, None, 1),
    "np": (1, 8, None),
    "draft": (0, 8, None),
    "accept": (0.0, 1.0, 0.05),
    "share": (0.0, 0.5, 0.8, 0.9, 0.95),
    "ctx": (512, 1_048_576, 512),
    "prompt": (1, 131_072, 64),
    "depth": (0, 1_048_576, 1024),
    "lm": ("mmap", "none", "mlock", "dio"),
    "vram": (1.0, 1024.0, None),
    "bw": (10.0, 20000.0, None),
    "gen": (3, 4, 5),
    "lanes": (1, 2, 4, 8, 16),
    "cpu": (1.0, 2000.0, None),
    "threads": (1, 1024, None),
    "ram": (1.0, 16384.0, 8.0),
    "build": (1, 10**9, None),
}
DECLARED = [settings_of(cls) for cls in (Scenario, Placement, Batching, Hardware, Host)]


def _subcommands() -> dict[str, argparse.ArgumentParser]:
    sub = next(a for a in build_parser()._actions if isinstance(a, argparse._SubParsersAction))
    return dict(sub.choices)


def _flags(s) -> set[str]:
    return {*s.flags, *(alias.flag for alias in s.aliases)}


def test_the_cli_flags_are_the_listed_ones_generated_from_the_settings_with_their_defaults():
    for command, parser in _subcommands().items():
        generated = [a for a in parser._actions if hasattr(a, "setting")]
        assert {f for a in generated for f in a.option_strings} == GENERATED_FLAGS[command], command
        for action in generated:
            s = action.setting
            if action.option_strings[0] in s.flags and action.default is not None and s.name != "placement":
                assert action.default == s.default, (command, s.name)
    defaults = vars(_subcommands()["predict"].parse_args(["--model", "m", "--hardware", "t4"]))
    assert defaults["placement"] == "cpu-moe" and defaults["accept_rate"] == Scenario().accept_rate == 0.7
    assert (defaults["n_ctx"], defaults["n_ubatch"], defaults["offload_min_batch"]) == (4096, 512, 32)


def test_no_cli_flag_that_a_setting_declares_is_added_by_hand():
    declared = {flag for settings in DECLARED for s in settings.values() for flag in _flags(s)}
    for command, parser in _subcommands().items():
        by_hand = [a.option_strings for a in parser._actions if not hasattr(a, "setting")]
        assert not [flags for flags in by_hand if set(flags) & declared], command


def test_url_keys_and_widget_ranges_are_the_listed_ones_generated_from_the_settings():
    from ui.sidebar import MACHINE_EDITS
    from ui.state import URL_SETTINGS

    table = {key: s.widget.options or (s.widget.lo, s.widget.hi, s.widget.step) for key, s in URL_SETTINGS.items()}
    assert table == URL_KEYS
    assert set(MACHINE_EDITS) == {"vram", "bw", "gen", "lanes", "cpu", "threads", "ram", "link"}
    for s in URL_SETTINGS.values():  # a widget never offers what the library refuses
        w = s.widget
        for value in w.options or [v for v in (w.lo, w.hi) if v is not None]:
            assert (s.lo is None or s.lo <= value) and (s.hi is None or value <= s.hi), s.name
            assert not s.choices or value in s.choices, s.name


SETTING_KEY = "|".join(sorted(URL_KEYS))
REDECLARED_IN_PAGES = re.compile(
    rf'(kept|url_value)\(\s*"({SETTING_KEY})"|key="({SETTING_KEY})"|(keep|remember)\([^)]*\b({SETTING_KEY})='
)
DECLARED_FLAGS = "|".join(
    re.escape(flag) for settings in DECLARED for s in settings.values() for flag in sorted(_flags(s))
)
REDECLARED_IN_CLI = re.compile(rf'add_argument\(\s*"({DECLARED_FLAGS})"')


def test_the_redeclaration_patterns_catch_a_hand_written_widget_and_flag():
    assert REDECLARED_IN_PAGES.search('st.slider("draft", 0, 8, kept("draft", 0, int, 0, 8), key="draft")')
    assert REDECLARED_IN_PAGES.search("keep(prompt=int(prompt), share=share)")
    assert REDECLARED_IN_CLI.search('sim.add_argument("--accept", type=_FRACTION, default=0.7)')
    assert not REDECLARED_IN_PAGES.search('kept("workload", kinds[0])') and not REDECLARED_IN_CLI.search(
        'sim.add_argument("--tokens", default=20_000)'
    )


def test_no_page_or_cli_module_redeclares_a_setting():
    pages = [ROOT / "app.py", *(ROOT / "pages").glob("*.py"), *(ROOT / "ui").glob("*.py")]
    assert [p.name for p in pages if REDECLARED_IN_PAGES.search(p.read_text())] == []
    cli = (ROOT / "moe_model" / "cli").glob("*.py")
    assert [p.name for p in cli if REDECLARED_IN_CLI.search(p.read_text())] == []


def _beyond(value, step: float):
    return type(value)(value + step)


def _given(cls: type, name: str, value) -> dict:
    """The keyword arguments that set one field: a per-GPU share as one of two GPUs' (the other at 1)."""
    return {name: (value, 1.0), "n_gpus": 2} if settings_of(cls)[name].default == () else {name: value}


RANGED = [(cls, n) for cls in (Scenario, Placement, Batching) for n, s in settings_of(cls).items() if s.hi is not None]


@pytest.mark.parametrize(("cls", "name"), RANGED, ids=[f"{c.__name__}.{n}" for c, n in RANGED])
def test_a_scenario_a_placement_and_a_batching_accept_exactly_the_range_their_flags_declare(cls, name):
    s = settings_of(cls)[name]
    kind = float if s.default == () else type(s.default)
    step = 1 if kind is int else 0.01
    for edge in (s.lo, s.hi):
        cls(**_given(cls, name, kind(edge)))  # positive control: both ends are accepted
    for outside in (_beyond(kind(s.lo), -step), _beyond(kind(s.hi), step), math.nan):
        with pytest.raises(MoeModelError):
            cls(**_given(cls, name, outside))


CHOSEN = [n for n, s in settings_of(Scenario).items() if s.choices]


@pytest.mark.parametrize("name", CHOSEN)
def test_a_scenario_accepts_exactly_the_choices_its_flag_declares(name):
    s = settings_of(Scenario)[name]
    for choice in s.choices:
        Scenario(**{name: choice})  # positive control
    for outside in ("maybe", s.choices[0].upper(), 1):
        with pytest.raises(MoeModelError, match=f"^{re.escape(s.label)} must be one of .*, got {outside!r}$"):
            Scenario(**{name: outside})


def test_check_declared_names_the_flag_in_one_line_for_a_range_a_choice_and_each_share():
    assert settings_of(Scenario)["budget_mib"].label == "--budget-mib (llama-server --moe-cache-mib)"
    assert settings_of(Scenario)["offload_min_batch"].label == "--offload-min-batch (GGML_OP_OFFLOAD_MIN_BATCH)"
    assert settings_of(Scenario)["flash_attn"].label == "--flash-attn/-fa"  # llama-server's -fa is one of its own
    cases = [
        (Scenario, {"concurrency": 0}, f"--concurrency (llama-server -np) must be in 1..{MAX_CONCURRENCY}, got 0"),
        (Scenario, {"n_ubatch": "many"}, "--ubatch-size/-ub takes a number, got 'many'"),
        (Scenario, {"accept_rate": 1.5}, "--accept must be in 0.0..1.0, got 1.5"),
        (Placement, {"n_gpu_layers": -2}, "--n-gpu-layers/-ngl must be in -1..1,024, got -2"),
        (Placement, {"n_gpus": 2, "tensor_split": (1.0, 2e6)}, "--tensor-split/-ts must be in 0..1,000,000, got"),
    ]
    for cls, kwargs, message in cases:
        with pytest.raises(MoeModelError, match=f"^{re.escape(message)}") as err:
            cls(**kwargs)
        assert "\n" not in str(err.value)
    assert Scenario(depth=None).depth is None  # a setting not given is not checked against a range


@pytest.mark.parametrize("name", ["vram_gib", "gpu_bw_gbs", "mem_bw_gbs", "threads", "ram_gib", "pcie_lanes"])
def test_a_machine_accepts_exactly_the_range_its_flag_and_widget_take(name):
    s, t4 = MACHINE_SETTINGS[name], preset("t4")  # the GPU's figures and its host's
    inside = s.choices or (s.lo, s.hi)
    outside = (3,) if s.choices else (s.lo / 2 if isinstance(s.lo, float) else s.lo - 1, s.hi * 2)
    for value in inside:
        t4.with_changes(**{name: value})  # positive control
    for value in outside:
        with pytest.raises(MoeModelError, match=f"implausible {name}"):
            t4.with_changes(**{name: value})


def test_the_fit_tables_list_every_time_parameter_from_its_prior():
    assert (
        *("gpu_eff", "token_ms", "sample_ns", "layer_us", "batch_expert_us", "copy_gbs_client", "copy_gbs_server"),
        *("vm_copy_factor", "copy_bw_share", "vm_sync_factor", "pageable_copy_us", "pageable_copy_us_hip"),
        *("pageable_copy_us_vulkan", "cpu_bw_eff_client", "cpu_bw_eff_server", "thread_gbs_per_ghz"),
        *("pinned_cpu_factor", "no_vnni_factor", "sync_us_cuda", "sync_us_other", "split_us_cuda", "split_us_other"),
        *("draft_ms", "fill_factor", "nofa_attn_eff"),
    ) == DECODE_PARAMS
    assert PREFILL_PARAMS == ("mm_eff", "prompt_ubatch_ms", "d2d_copy_us", "first_prompt_ms")
    assert list(PARAM_BOUNDS) == list(PRIOR_WIDTH) == [*DECODE_PARAMS, *PREFILL_PARAMS] == list(vars(TimeParams()))
    for name, (lo, hi) in PARAM_BOUNDS.items():  # each prior inside its bounds, pulled with a positive width
        assert lo < getattr(TimeParams(), name) < hi and PRIOR_WIDTH[name] >= math.log(1.3), name


def test_each_flag_is_the_first_spelling_of_one_setting_only():
    """Issue 37: --prompt-tokens was declared twice with two meanings; simulate's is --replay-prompt-tokens now,
    --prompt-tokens its old spelling there."""
    firsts = [s.flag for declared in DECLARED for s in declared.values() if getattr(s, "flags", ())]
    assert len(firsts) == len(set(firsts)), sorted(f for f in firsts if firsts.count(f) > 1)
    argv = ["--model", "m", "--synthetic", "--budget-mib", "1", "--prompt-tokens", "7"]
    assert _subcommands()["simulate"].parse_args(argv).prompt_tokens == 7
