"""predict's text: every figure carries how it is known, the usable/slow/unusable words, the nearest measured row."""

import json
import re

from cli_runs import main_exit

from moe_model.answers.basis import CALIBRATED, MEASURED, MODELLED, REPLAYED

T4 = ("--model", "sample_data/models/Qwen3-30B-A3B-Q4_K_M.gguf", "--hardware", "Tesla T4", "--budget-mib", "10000")
HDD_235B = (
    "--model",
    "sample_data/models/Qwen3-235B-A22B-Q4_K_M-00001-of-00003.gguf",
    "--hardware",
    "RTX 4090",
    "--budget-mib",
    "16000",
    "--ram-gib",
    "64",
    "--drive",
    "HDD",
)
FIGURE = re.compile(r"\d(\.\d+)? ?(t/s|%|s\b|MiB|GiB)")
BADGE = re.compile(rf"\[({MEASURED}|{REPLAYED}|{CALIBRATED}|{MODELLED})\b")
UNBADGED = ("note:", "llama-server command:", "Hit rates:", "How each number is known", "time model:", "This setting")


def test_every_line_with_a_figure_carries_a_badge(capsys):
    code, out, _ = main_exit(capsys, "predict", *T4)
    assert code == 0
    lines = [line.strip() for line in out.splitlines()[1:]]  # the first line restates the request
    figured = [line for line in lines if FIGURE.search(line) and not line.startswith(UNBADGED)]
    assert len(figured) >= 10
    assert [line for line in figured if not BADGE.search(line)] == []


def test_the_nearest_measured_row_stands_beside_the_prediction_in_text_and_json(capsys):
    _, out, _ = main_exit(capsys, "predict", *T4)
    assert "Nearest measured row: Qwen3-30B-A3B on Tesla T4" in out and "measured 43.2 t/s" in out
    _, out, _ = main_exit(capsys, "predict", *T4, "--json")
    row = json.loads(out)["nearest_measured"]
    assert (row["where"], row["decode_tps"], row["basis"]) == ("reference table row t4-cpumoe-10000", 43.2, MEASURED)


def test_an_unusable_setting_says_so_and_what_would_help(capsys):
    _, out, _ = main_exit(capsys, "predict", *HDD_235B)
    assert "This setting is unusable:" in out and "What would help: 131 GiB of RAM" in out
    _, out, _ = main_exit(capsys, "predict", *HDD_235B, "--json")
    assert json.loads(out)["usability"] == "unusable"
