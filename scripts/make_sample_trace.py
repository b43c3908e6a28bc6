"""Cut the bundled GPT-OSS-20B routing sample from the full trace (every third sequence).

python scripts/make_sample_trace.py SOURCE  (a folder with the full routing.npz and sequences.csv; provenance and
licence: sample_data/traces/gpt-oss-20b/README.md)
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np
import pandas as pd

ROOT = Path(__file__).resolve().parent.parent
OUT = ROOT / "sample_data" / "traces" / "gpt-oss-20b"
STEP = 3


def main(src: Path) -> None:
    data = np.load(src / "routing.npz")
    experts, offsets = data["experts"], data["seq_offsets"]
    keep = np.arange(0, len(offsets) - 1, STEP)
    parts = [experts[offsets[s] : offsets[s + 1]] for s in keep]
    new_offsets = np.concatenate([[0], np.cumsum([len(p) for p in parts])]).astype(np.int64)
    OUT.mkdir(parents=True, exist_ok=True)
    np.savez_compressed(OUT / "routing.npz", experts=np.concatenate(parts), seq_offsets=new_offsets)
    table = pd.read_csv(src / "sequences.csv").iloc[keep].reset_index(drop=True)
    table["seq"] = np.arange(len(table))
    table.to_csv(OUT / "sequences.csv", index=False)
    print(f"{len(keep)} sequences, {new_offsets[-1]} tokens -> {OUT / 'routing.npz'}")


if __name__ == "__main__":
    if len(sys.argv) != 2:
        sys.exit(__doc__)
    main(Path(sys.argv[1]))
