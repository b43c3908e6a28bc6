"""`record`: run the user's model on their CPU through llama-cpp-python (the optional extra `.[record]`) as
llama-server would serve the prompts, and write the routing (a recorded trace `simulate --trace` replays exactly)
and a host record (this CPU's speed on this model)."""

from __future__ import annotations

import argparse
import sys

from moe_model.atomic import write_text_atomic
from moe_model.cli.args import SCENARIO, add_setting, ranged, whole
from moe_model.errors import MoeModelError
from moe_model.limits import (
    DEFAULT_CTX,
    DEFAULT_RECORD_BATCH,
    DEFAULT_RECORD_PREDICT,
    MAX_CONCURRENCY,
    MAX_CTX,
    MAX_RECORD_PREDICT,
    MAX_UBATCH,
)
from moe_model.speed.hardware import MACHINE_SETTINGS

INTERRUPTED = 130  # the shell's exit status of a command ended by Ctrl-C


def add_parser(sub) -> None:
    p = sub.add_parser("record", help="record your model's routing and your CPU's speed (needs .[record])")
    p.add_argument("--model", required=True, metavar="MODEL.gguf", help="the full GGUF (the first shard of a split)")
    p.add_argument("--prompts", required=True, metavar="FILE", help="paragraphs of text, or JSONL with prompt/messages")
    p.add_argument(
        "-n",
        dest="n_predict",
        type=ranged(whole, 1, MAX_RECORD_PREDICT),
        default=DEFAULT_RECORD_PREDICT,
        metavar="N",
        help=f"tokens generated per prompt, greedy (default {DEFAULT_RECORD_PREDICT})",
    )
    p.add_argument(
        "-c",
        "--ctx-size",
        dest="n_ctx",
        type=ranged(whole, 1, MAX_CTX),
        default=DEFAULT_CTX,
        metavar="C",
        help="context size, as the server's -c",
    )
    p.add_argument(
        "-b",
        "--batch-size",
        dest="n_batch",
        type=ranged(whole, 1, MAX_UBATCH),
        default=DEFAULT_RECORD_BATCH,
        metavar="B",
        help="n_batch, as the server's -b",
    )
    add_setting(p, SCENARIO["n_ubatch"], metavar="U", help="n_ubatch, as the server's -ub")
    p.add_argument(
        "-np",
        "--parallel",
        dest="n_parallel",
        type=ranged(whole, 1, MAX_CONCURRENCY),
        default=1,
        metavar="P",
        help="the server's -np: only 1 is recorded",
    )
    add_setting(p, MACHINE_SETTINGS["threads"], default=None, metavar="T", help="CPU threads (default: physical cores)")
    add_setting(
        p,
        SCENARIO["build"],
        help="llama.cpp build whose llama-server the trace follows: its start-up probe and the last layer's rows "
        "(default: the current mainline)",
    )
    p.add_argument("-o", "--out", required=True, metavar="OUT.npz", help="the recorded trace")
    p.add_argument("--host-out", metavar="HOST.json", help="the host record (speed of this model on this CPU)")
    p.add_argument(
        "--measure-drive",
        action="store_true",
        help="after the recording, time a cold read of the model file's first GiB (its pages dropped from the page "
        "cache first) for the host record's drive rate",
    )
    p.set_defaults(func=cmd_record)


def check_batching(n_batch: int, n_ubatch: int, n_parallel: int) -> None:
    if n_batch < n_ubatch:
        raise MoeModelError(f"-b {n_batch} is below -ub {n_ubatch}: llama.cpp splits a batch into ubatches of -ub")
    if n_parallel != 1:
        raise MoeModelError(
            "record serves one request at a time (-np 1): a recorded trace has no place for the interleaving of "
            f"-np {n_parallel} parallel requests"
        )


def cmd_record(args: argparse.Namespace) -> int:
    from moe_model.record.host import model_files
    from moe_model.record.prompts import read_prompts
    from moe_model.record.runtime import load_runtime

    check_batching(args.n_batch, args.n_ubatch, args.n_parallel)
    model = model_files(args.model)
    prompts = read_prompts(args.prompts)
    runtime = load_runtime()
    try:
        recording = _record(args, prompts, runtime)
    except KeyboardInterrupt:  # while loading the model or reading the prompts' tokens
        recording = None
    if recording is None or not recording.ubatches:
        print("record: interrupted before any ubatch was recorded; nothing written", file=sys.stderr)
        return INTERRUPTED
    return _write(args, model, recording, runtime)


def _record(args: argparse.Namespace, prompts, runtime):
    from moe_model.record.host import physical_cores
    from moe_model.record.session import RecordSettings, record

    args.threads = args.threads or physical_cores()
    settings = RecordSettings(args.n_predict, args.n_ctx, args.n_batch, args.n_ubatch, args.threads, build=args.build)
    return record(args.model, prompts, settings, _stderr, runtime=runtime)


def _write(args: argparse.Namespace, model, recording, runtime) -> int:
    """The trace, the host record where timings exist (the drive timed where asked, after llama.cpp let the file
    go), a summary; 130 with one line when Ctrl-C cut the run."""
    from moe_model.record.drive import measure_drive
    from moe_model.record.host import host_record, largest_shard
    from moe_model.record.trace_out import write_trace

    write_trace(args.out, recording.ubatches)
    drive = measure_drive(largest_shard(model)) if args.measure_drive and not recording.interrupted else None
    host = host_record(model, recording, args.threads, runtime.version, runtime.llama_cpp, drive)
    if args.host_out and host is not None:
        write_text_atomic(args.host_out, host.to_json())
    print(_summary(args, recording, host))
    if drive is not None:
        print(drive.describe())
    if recording.interrupted:
        kept = "and the host record " if args.host_out and host is not None else ""
        print(
            f"record: interrupted; {args.out} {kept}keeps the {len(recording.ubatches):,} complete ubatches recorded",
            file=sys.stderr,
        )
        return INTERRUPTED
    return 0


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def _summary(args: argparse.Namespace, recording, host) -> str:
    lines = [f"trace: {args.out} ({len(recording.ubatches):,} ubatches, {len(recording.generated)} prompts)"]
    if host is None:
        lines.append("host record: not written (the CPU was not timed: an interrupted run, or -n below 3)")
        return "\n".join(lines)
    lines.append(
        f"CPU ({host.threads} threads): decode {host.decode_tps:,.1f} tokens/s at depth {host.decode_depth_tokens:,}, "
        f"prompt {host.prompt_tps:,.1f} tokens/s (measured)"
    )
    if args.host_out:
        lines.append(f"host record: {args.host_out}")
    return "\n".join(lines)
