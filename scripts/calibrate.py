"""Calibrate the time model and write sample_data/calibration.json (a few seconds).

- "Tesla T4": the seed article's T4 rows (Qwen3-30B-A3B Q4_K_M), reference table in sample_data/.
- "H200": the real llama-server runs in sample_data/groundtruth (small synthetic qwen3moe).

    python scripts/calibrate.py
"""

from __future__ import annotations

import json

from moe_model.calibration import CALIBRATION_JSON, GROUNDTRUTH, SAMPLE, calibration_record, h200_points, t4_points
from moe_model.hardware import preset
from moe_model.model_spec import load_model
from moe_model.timing import calibrate


def main() -> None:
    qwen = load_model(SAMPLE / "models" / "Qwen3-30B-A3B-Q4_K_M.gguf")
    t4 = t4_points(qwen)
    t4_cal = calibrate(qwen, preset("Tesla T4"), t4)
    small = load_model(GROUNDTRUTH / "synthetic-qwen3moe-Q4_K_M-header.gguf")
    h200 = h200_points(small)
    h200_cal = calibrate(small, preset("H200"), h200)
    out = {
        "Tesla T4": calibration_record(
            t4_cal,
            t4,
            "seed-article T4 rows of sample_data/reference-measurements.csv (Qwen3-30B-A3B Q4_K_M); "
            "prompt speed: 3 parameters on 2 points (exact, not validated)",
        ),
        "H200": calibration_record(
            h200_cal,
            h200,
            "real llama-server runs of sample_data/groundtruth (H200, PCIe 5, "
            "small synthetic qwen3moe; link rates measured in bw.json)",
        ),
    }
    CALIBRATION_JSON.write_text(json.dumps(out, indent=1) + "\n")
    print(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
