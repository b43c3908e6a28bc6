"""Coverage-guided fuzzing of the readers of untrusted bytes (GGUF header, NPZ/CSV traces, logs) with atheris.

    pip install -r requirements-fuzz.txt
    python scripts/fuzz.py gguf --seconds 60          # one target, a time budget
    python scripts/fuzz.py all --seconds 30           # every target in turn

Seeds are the bundled sample files; a crashing input is written to tests/fuzz_corpus/<target>/ so that
tests/test_fuzz.py replays it in every test run. Exit status 1 when a crash was found.
"""

from __future__ import annotations

import argparse
import hashlib
import os
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT))

SEED_FILES = {
    "gguf": ["sample_data/groundtruth/synthetic-qwen3moe-Q4_K_M-header.gguf"],
    "trace": ["sample_data/traces/gpt-oss-20b/routing.npz"],
    "stream": ["sample_data/groundtruth/traces/b25.npz"],
    "csv": [],
    "log": [
        "sample_data/groundtruth/logs/server_np4_b25.log",
        "sample_data/groundtruth/logs/server_minany_minus1.log",
    ],
}
MAX_SEED_BYTES = 256 * 1024  # libFuzzer works on small inputs; a prefix still covers the header walk


def _fuzz_one(target: str, seconds: int) -> int:
    """Run atheris on one target in this process; libFuzzer exits the process on a crash."""
    import atheris

    with atheris.instrument_imports():
        from moe_model.fuzzing import ReaderCrashError, check

    def test_one_input(data: bytes) -> None:
        try:
            check(target, data)
        except ReaderCrashError:
            out = ROOT / "tests" / "fuzz_corpus" / target
            out.mkdir(parents=True, exist_ok=True)
            (out / f"crash-{hashlib.sha1(data).hexdigest()[:12]}.bin").write_bytes(data)
            raise

    seeds = Path(tempfile.mkdtemp(prefix=f"fuzz-{target}-"))
    for i, name in enumerate(SEED_FILES[target]):
        (seeds / f"seed{i}").write_bytes((ROOT / name).read_bytes()[:MAX_SEED_BYTES])
    for path in sorted((ROOT / "tests" / "fuzz_corpus" / target).glob("*")):
        (seeds / path.name).write_bytes(path.read_bytes())
    args = [sys.argv[0], str(seeds), f"-max_total_time={seconds}", f"-max_len={MAX_SEED_BYTES}", "-rss_limit_mb=4096"]
    args.append(f"-artifact_prefix={seeds}/")  # libFuzzer's own crash files stay out of the repository
    atheris.Setup(args, test_one_input)
    atheris.Fuzz()
    return 0


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("target", choices=[*SEED_FILES, "all"])
    parser.add_argument("--seconds", type=int, default=60, help="time budget per target")
    args = parser.parse_args()
    if args.target != "all":
        return _fuzz_one(args.target, args.seconds)
    status = 0
    for target in SEED_FILES:  # one process each: libFuzzer runs once per process
        cmd = [sys.executable, __file__, target, "--seconds", str(args.seconds)]
        status |= subprocess.run(cmd, env=os.environ.copy(), check=False).returncode != 0
    return status


if __name__ == "__main__":
    sys.exit(main())
