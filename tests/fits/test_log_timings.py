"""Measured points share one schema; a log cross-checks against the plan from its header."""

from __future__ import annotations

from dataclasses import replace

import pytest
from conftest import GROUNDTRUTH, GT_BUDGETS, QWEN30B, SAMPLE

from moe_model.fits.log_timings import COLUMNS, crosscheck, derive, load_reference, point_from_run
from moe_model.readers.logs import parse_log
from moe_model.readers.model_spec import load_model

STARTING = sorted(p.stem for p in (GROUNDTRUTH / "logs").glob("*.log") if not p.stem.endswith(("minus1", "off")))


def test_reference_table_is_loaded_from_the_bundled_data_in_the_schema():
    table = load_reference()
    assert tuple(table.columns) == COLUMNS
    row = table.set_index("id").loc["t4-cpumoe-10000"]
    assert row["decode_tps"] == 43.2 and row["hit_rate_small_pct"] == 95.73


def test_the_reference_table_is_the_callers_copy_and_a_changed_file_is_read_again(tmp_path):
    mine = load_reference()
    mine.loc[:, "decode_tps"] = -1.0  # a caller's change
    assert (load_reference()["decode_tps"].dropna() > 0).all()
    path = tmp_path / "reference.csv"
    path.write_text("id,decode_tps,parallel\na,10,1\n")
    assert load_reference(path)["decode_tps"].tolist() == [10]
    path.write_text("id,decode_tps,parallel\na,20,2\nb,30,1\n")
    assert load_reference(path)["decode_tps"].tolist() == [20, 30]


@pytest.mark.parametrize("name", STARTING)
def test_every_groundtruth_log_crosschecks_with_the_header_line_by_line(gt_model, name):
    (run,) = parse_log(GROUNDTRUTH / "logs" / f"{name}.log")
    budget, lines = crosscheck(run, gt_model)
    assert lines and all(line.ok for line in lines if line.comparable), [vars(x) for x in lines if x.ok is False]
    case = name.split("_", 1)[1]
    if case in GT_BUDGETS:
        assert budget <= GT_BUDGETS[case]


def test_a_mismatch_is_reported_on_its_line(gt_model):
    (run,) = parse_log(GROUNDTRUTH / "logs" / "server_b25.log")
    run.groups[1] = type(run.groups[1])(8, "q4_K", 254, 24.8)
    _, lines = crosscheck(run, gt_model, budget_mib=403)
    assert [line.what for line in lines if line.ok is False] == ["group 2"]


def test_the_t4_example_log_matches_the_qwen_header():
    (run,) = parse_log(SAMPLE / "logs" / "t4-cpumoe-10000.log")
    budget, lines = crosscheck(run, load_model(QWEN30B))
    assert budget == 10000 and all(line.ok for line in lines if line.comparable)


def test_a_crosscheck_names_the_policy_the_logs_build_ran(gt_model):
    # the ground-truth runs were built without git ("build 0 (unknown)"): no build is logged, but their cache size
    # line is in MiB only, as b11480-b12169 print it (b12170 shows tokens): the plain LRU, b11549 unless one is given
    (run,) = parse_log(GROUNDTRUTH / "logs" / "server_b25.log")
    assert run.build is None and all(d.mib_only for d in run.devices)
    plain = "not logged: its cache size line is b11480-b12169's (plain LRU)"
    for given, shown in ((None, 11549), (12569, 11549), (11600, 11600)):  # a ClassLRU build given contradicts it
        policy = crosscheck(run, gt_model, build=given)[1][-1]
        assert (policy.what, policy.logged, policy.predicted) == (
            "replacement policy",
            f"b{shown} ({plain})",
            "lru-b11549 (exact)",
        ), given
    run.devices = [replace(d, mib_only=False) for d in run.devices]  # a later build's size line: no era shown
    policy = {line.what: line for line in crosscheck(run, gt_model)[1]}
    assert (policy["replacement policy"].logged, policy["replacement policy"].predicted) == (
        "b12569 (not logged: mainline assumed)",
        "class-lru-b12170 (modelled)",
    )
    given = crosscheck(run, gt_model, build=11549)[1][-1]
    assert (given.logged, given.predicted, given.ok) == ("b11549 (given)", "lru-b11549 (exact)", None)
    run.build = 12100  # a `build: 12100 (...)` line
    logged = crosscheck(run, gt_model, build=12569)[1][-1]
    assert (logged.logged, logged.predicted) == ("b12100 (logged)", "lru-b11549 (exact)")


def test_point_and_derived_values_from_a_log():
    (run,) = parse_log(GROUNDTRUTH / "logs" / "server_np4_b25.log")
    point = point_from_run(run, "server_np4_b25.log")
    assert set(point) <= set(COLUMNS)
    assert point["parallel"] == 4 and point["hit_rate_small_pct"] == 34.59 and point["placement"] == "--cpu-moe"
    derived = derive(run)
    assert derived.small_lookup_share == 1.0
    assert derived.uploaded_mib_per_token == pytest.approx(56549.07 / 1024)


def test_a_log_without_cache_lines_has_no_budget_to_check(gt_model):
    (run,) = parse_log(GROUNDTRUTH / "logs" / "server_off.log")
    budget, lines = crosscheck(run, gt_model)
    assert budget is None and all(line.ok is None for line in lines)


def test_slots_the_header_cannot_give_leave_the_budget_unknown_instead_of_hanging(gt_model):
    from moe_model.fits.log_timings import infer_budget
    from moe_model.llama.slot_plan import Placement

    (run,) = parse_log(GROUNDTRUTH / "logs" / "server_b25.log")
    assert infer_budget(run, gt_model, Placement()) == 403  # positive control
    group = type(run.groups[0])
    run.groups[0] = group(6, "q6_K", 5000, 99.0)  # more slots than 6 layers x 128 experts
    assert infer_budget(run, gt_model, Placement()) is None
    run.groups[:] = [group(6, "q6_K", 768, 100.0), group(8, "q4_K", 3, 0.3)]  # a mix no budget gives
    assert infer_budget(run, gt_model, Placement()) == 1614  # the smallest giving the first group, reported


def test_a_fork_run_is_not_compared_with_mainlines_plan_and_is_not_mixed_into_a_calibration(gt_model):
    from log_cases import FORK_LOG

    from moe_model.errors import MoeModelError
    from moe_model.fits.points import check_engines
    from moe_model.readers.logs import parse_lines

    (fork,) = parse_lines(FORK_LOG.splitlines(keepends=True))
    budget, lines = crosscheck(fork, gt_model)
    assert budget is None and [line.what for line in lines] == ["engine", "fork cache"]
    assert all(line.ok is None for line in lines) and lines[0].logged == "qvac-fabric fork"
    (mainline,) = parse_log(GROUNDTRUTH / "logs" / "server_b25.log")
    check_engines([("a#1", mainline), ("b#1", mainline)])  # one engine: accepted
    with pytest.raises(MoeModelError, match=r"mix engines .*mainline: a#1; qvac-fabric fork: fork.log#1"):
        check_engines([("a#1", mainline), ("fork.log#1", fork)])
