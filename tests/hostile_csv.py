"""The hostile CSV traces of issue 39, written to a folder, and a Python run in a subprocess whose peak RSS it
reports: the 10^7-column header (~40 MB) and the single row of 100,003 fields (~357 KB) under a short header."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

from conftest import ROOT

WIDE_HEADER_COLUMNS = 10**7
WIDE_ROW_FIELDS = 100_003


def hostile_csvs(folder: Path) -> dict[str, Path]:
    """{"10^7 columns": path, "100,003 fields": path}, written once per folder."""
    wide_header, wide_row = folder / "wide_header.csv", folder / "wide_row.csv"
    if not wide_header.exists():
        wide_header.write_bytes(b"seq,token,layer" + b",e00" * (WIDE_HEADER_COLUMNS - 3) + b"\n0,0,0,1\n")
        row = b",".join(str(i % 128).encode() for i in range(WIDE_ROW_FIELDS))
        wide_row.write_bytes(b"seq,token,layer,e0,e1,e2,e3,e4,e5,e6,e7\n" + row + b"\n")
    return {"10^7 columns": wide_header, "100,003 fields": wide_row}


# the child runs `body` (which sets `result`), then prints it with its own seconds and peak RSS as JSON; the peak
# is VmHWM (this process image's own: ru_maxrss keeps the forking parent's peak across exec)
_CHILD = """
import json, time
start = time.perf_counter()
{body}
result["seconds"] = time.perf_counter() - start
status = dict(line.split(":", 1) for line in open("/proc/self/status"))
result["peak_rss_mib"] = int(status["VmHWM"].split()[0]) / 1024
print(json.dumps(result))
"""


def run_measured(body: str, env: dict | None = None) -> dict:
    """`body` run in a fresh Python (the repository on its path): its `result` with seconds and peak_rss_mib."""
    out = subprocess.run(
        [sys.executable, "-c", _CHILD.format(body=body)], capture_output=True, text=True, cwd=ROOT, timeout=300, env=env
    )
    assert out.returncode == 0, out.stderr
    return json.loads(out.stdout.strip().splitlines()[-1])
