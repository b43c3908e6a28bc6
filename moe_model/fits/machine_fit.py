"""One machine from its own llama-server logs: `python -m moe_model calibrate LOG...` and its machine file.

The logs are checked before anything is fitted, each refusal naming the file and run: every run of one model
(the `--model` header's shape and cache lines), one GPU (the `--hardware` preset), one llama.cpp build and one
load mode; the same run given twice is refused. The machine's own terms (upload rate, CPU expert rate, cost
per cached layer, fixed cost per ubatch) are then fitted with the global parameters held; each run is also
predicted by a fit on the others. Runs with concurrent streams are fitted at their concurrency; the error a
prediction carries is the left-out error of runs of its kind (one stream, or several).

The machine file records the machine, what it was fitted on (GPU, model, build, load mode, and per run its
concurrency and whether its timing includes the server's first request after start) and the errors. Reading
one back checks it as strictly as the command-line flags: a regular file under a size cap, every field typed
and in range, one line per refusal.
"""

from __future__ import annotations

import hashlib
import json
import math
import os
import re
import stat
import typing
from collections.abc import Sequence
from dataclasses import MISSING, asdict, dataclass, fields, is_dataclass, replace
from pathlib import Path

import numpy as np

from moe_model.atomic import write_text_atomic
from moe_model.errors import LogError, MachineFileError, MoeModelError
from moe_model.fits.calibration import UNCERTAINTY_QUANTILE, _fit_fields, decode_errors
from moe_model.fits.log_reading import reading_from_logs
from moe_model.fits.log_timings import (
    crosscheck,
    decode_tps_of,
    lines_build,
    request_label,
    timed_requests,
)
from moe_model.fits.points import Point, check_engines, log_points
from moe_model.limits import (
    MAX_BUILD,
    MAX_CONCURRENCY,
    MAX_MACHINE_FILE_BYTES,
    MAX_MACHINE_REL_ERROR,
    MAX_MACHINE_RUNS,
    MAX_MACHINE_TEXT_CHARS,
    MAX_RUN_REQUESTS,
)
from moe_model.policies.class_lru import READING_CHOICES
from moe_model.readers.logs import MAINLINE, LogRun, parse_log
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware, preset
from moe_model.speed.rates import TimeParams, cpu_expert_gbs, upload_gbs
from moe_model.speed.scenario import LOAD_MODES
from moe_model.speed.term_words import MACHINE_TERM_WORDS

MACHINE_BOUNDS = {"pageable_gbs": (0.3, 64.0), "pinned_gbs": (0.3, 64.0), "cpu_expert_gbs": (1.0, 500.0)}
MAX_MACHINE_ERROR = 0.25  # refuse a machine fit whose one-stream runs, each left out in turn, are predicted worse
FITTED_TERMS = ("token_ms", "cpu_expert_gbs", "pinned_gbs", "pageable_gbs", "sync_us")
MODEL_FIELDS = ("architecture", "n_layer", "n_expert", "n_expert_used", "n_embd", "n_ff_exp")  # logged and in headers


# --- the runs of a user's logs, checked ---


@dataclass(frozen=True)
class LoggedRun:
    """One run calibrate uses: which file and run it is, and what its log says about it."""

    name: str  # "FILE#RUN": the file as given (its full path on the command line), the run's number in it
    gpu: str | None  # as logged (CUDA backends log it; others may not)
    build: int | None  # as its lines show it (measurements.lines_build), None when they show none
    model: str | None
    load_mode: str
    concurrency: int
    requests: int  # requests its decode speed is measured on
    first_request: bool  # its timing includes the server's first request after start (not steady state)
    budget_mib: int = 0  # its --moe-cache-mib (0: no cache)


def parse_logs(paths: Sequence[str | Path]) -> list[tuple[str, list[LogRun]]]:
    """Each log parsed, named by its path as given; a file that cannot be read is named in the one-line error."""
    if len(paths) > MAX_MACHINE_RUNS:
        raise MoeModelError(f"{len(paths):,} logs, above this tool's limit of {MAX_MACHINE_RUNS} runs at once")
    out = []
    for path in paths:
        try:
            out.append((str(path), parse_log(path)))
        except (MoeModelError, OSError) as err:
            raise LogError(f"{path}: {getattr(err, 'strerror', None) or err}") from None
    return out


def _fingerprint(run: LogRun) -> str:
    """What a run logged, without its place in the file: equal for the same run given twice."""
    record = run.as_dict()
    record.pop("index")
    return hashlib.sha256(json.dumps(record, sort_keys=True, default=str).encode()).hexdigest()


def _gpu_words(name: str) -> set[str]:
    return set(re.sub(r"[^a-z0-9]+", " ", name.lower()).split()) - {"nvidia", "geforce", "amd"}


def _same_gpu(logged: str, hw: Hardware) -> bool:
    """The logged device is the preset's card: the preset its name selects, else every word of the preset's name."""
    try:
        return preset(" ".join(sorted(_gpu_words(logged), key=logged.lower().find))).name == hw.name
    except MoeModelError:
        return _gpu_words(hw.name) <= _gpu_words(logged)


def _model_mismatch(run: LogRun, model: ModelSpec) -> str | None:
    """How a run's logged model differs from the header's (shape, then cache lines), or None."""
    logged = {k: run.model.get(k) for k in MODEL_FIELDS if run.model.get(k) is not None}
    diffs = [f"{k} {v} (header: {getattr(model, k)})" for k, v in logged.items() if v != getattr(model, k)]
    if diffs:
        return ", ".join(diffs)
    bad = next((c for c in crosscheck(run, model)[1] if c.ok is False), None)
    return None if bad is None else f"{bad.what}: logged {bad.logged}, header {bad.predicted}"


def _check_same(runs: Sequence[LoggedRun], attr: str, what: str) -> None:
    """Every run that logs `attr` logs the same value, else a refusal naming one run of each."""
    first = next((r for r in runs if getattr(r, attr) is not None), None)
    for run in runs:
        value = getattr(run, attr)
        if value is not None and value != getattr(first, attr):
            raise MoeModelError(
                f"{run.name} ran {what} {value}, {first.name} {what} {getattr(first, attr)}: "
                f"calibrate one {what} at a time"
            )


def _checked_run(
    run: LogRun, source: str, model: ModelSpec, hw: Hardware, build: int | None
) -> tuple[LoggedRun, list[Point]]:
    """One run that started and timed a request, refused (naming it) if it ran another model or GPU; `build` is
    taken for a log that names none."""
    name = f"{source}#{run.index + 1}"
    if not run.model:
        raise LogError(f"{name}: the log does not name its model (start llama-server with -lv 4)")
    if mismatch := _model_mismatch(run, model):
        raise MoeModelError(f"{name} ran another model than --model {model.name}: {mismatch}")
    gpu = run.placement.get("gpu")
    if gpu and not _same_gpu(str(gpu), hw):
        raise MoeModelError(f"{name} ran on {gpu}, not on the {hw.name} given: calibrate one GPU at a time")
    # named f"{source}#{run.index + 1}" too; the later requests where the run has them (the steady state)
    points = log_points([run], model, hw, source, hw.name, build=build, steady=True)
    sc, first = points[0].scenario, points[0].request == "first"
    timed = len(timed_requests(run)) - (0 if first else 1)
    logged = LoggedRun(
        name, gpu, lines_build(run, build), run.model.get("name"), sc.load_mode, sc.concurrency, timed, first,
        sc.budget_mib,
    )  # fmt: skip
    return logged, points


def machine_points(
    logs: Sequence[tuple[str, list[LogRun]]], model: ModelSpec, hw: Hardware, build: int | None = None
) -> tuple[list[Point], tuple[LoggedRun, ...]]:
    """The runs that started and timed a request, as points of this machine, after checking them all (one engine:
    the qvac-fabric fork's runs are not mixed with mainline's); `build` for the logs that name none."""
    seen: dict[str, str] = {}
    points, logged = [], []
    usable_runs = [(source, [run for run in runs if run.starts and decode_tps_of(run)]) for source, runs in logs]
    check_engines([(f"{source}#{run.index + 1}", run) for source, runs in usable_runs for run in runs])
    for source, usable in usable_runs:  # the runs log_points keeps
        if not usable:
            raise LogError(f"{source}: no run that started and timed a request (decode): nothing to calibrate")
        for run in usable:
            name = f"{source}#{run.index + 1}"
            if (earlier := seen.setdefault(_fingerprint(run), name)) != name:
                raise MoeModelError(f"{name} and {earlier} are the same run (same log lines): give each run once")
            if len(logged) == MAX_MACHINE_RUNS:
                raise MoeModelError(f"more than {MAX_MACHINE_RUNS} runs, this tool's limit: calibrate fewer at once")
            one, found = _checked_run(run, source, model, hw, build)
            logged.append(one)
            points += found
    for attr, what in (("gpu", "GPU"), ("model", "model"), ("build", "llama.cpp build")):
        _check_same(logged, attr, what)
    return points, tuple(logged)


# --- the fit ---


@dataclass(frozen=True)
class MachineFit:
    """A machine calibrated from its logs: the machine with its fitted terms, what it was fitted on, the errors."""

    hardware: Hardware
    fitted: tuple[str, ...]
    fit_errors: dict[str, float]  # each run, predicted by the fit
    left_out_errors: dict[str, float]  # each run, predicted by a fit on the other runs
    judged: tuple[str, ...]  # one-stream runs whose left-out error judges the fit (the others alone pin a term)
    rel_error: float  # the error a one-stream prediction carries (left-out, 68th percentile)
    accepted: bool
    reason: str
    load_mode: str
    rel_error_concurrent: float | None = None  # the same for concurrent streams, from the runs that had them
    runs: tuple[LoggedRun, ...] = ()
    gpu: str | None = None
    model: str | None = None
    build: int | None = None
    engine: str = MAINLINE  # mainline llama.cpp, or the qvac-fabric fork (never both: machine_points refuses it)
    class_lru: dict | None = None  # b12170+ logs: the ClassLRU reading they picked (log_reading.ReadingPick)
    held: tuple[str, ...] = ()  # machine terms not fitted: a host record measured them (host_fit.HOST_SETTLED)

    @property
    def fitted_words(self) -> str:
        """The fitted terms in plain words ("the CPU's expert rate, the upload rate, ..."); the JSON keeps their
        field names."""
        return ", ".join(MACHINE_TERM_WORDS.get(term, term) for term in self.fitted)

    @property
    def request(self) -> str:
        """Which request the fit predicts: "steady state" (the runs' later requests), "first request" (runs of one
        request), or both where the runs differ."""
        kinds = {request_label(r.first_request) for r in self.runs}
        return kinds.pop() if len(kinds) == 1 else " and ".join(sorted(kinds))

    @property
    def left_out_by_budget(self) -> dict[int, float]:
        """Each logged budget's left-out error (the largest of its runs), every budget the logs hold: the error on
        the budgets the user will look at, the large ones included."""
        by_budget: dict[int, float] = {}
        for run in self.runs:
            error = self.left_out_errors.get(run.name)
            if error is not None and abs(error) >= abs(by_budget.get(run.budget_mib, 0.0)):
                by_budget[run.budget_mib] = error
        return dict(sorted(by_budget.items()))

    @property
    def request_note(self) -> str:
        """Which request the fit predicts, and its left-out error at every budget the logs hold."""
        budgets = ", ".join(f"{b:,} MiB {100 * e:+.1f} %" for b, e in self.left_out_by_budget.items())
        return (
            f"Fitted on the {self.request} of each run (every page predicts the steady state). "
            f"Error when left out, at each logged budget: {budgets}."
        )

    def as_dict(self) -> dict:
        return {
            "hardware": self.hardware.as_dict(),
            "gpu": self.gpu,
            "model": self.model,
            "build": self.build,
            "engine": self.engine,
            "load_mode": self.load_mode,
            "fitted": list(self.fitted),
            "fit_errors": self.fit_errors,
            "left_out_errors": self.left_out_errors,
            "judged": list(self.judged),
            "rel_error": self.rel_error,
            "rel_error_concurrent": self.rel_error_concurrent,
            "accepted": self.accepted,
            "reason": self.reason,
            "request": self.request,
            "left_out_by_budget_mib": {str(b): e for b, e in self.left_out_by_budget.items()},
            "runs": [asdict(r) for r in self.runs],
            "class_lru_reading": self.class_lru["reading"] if self.class_lru else None,
            "class_lru_fit": self.class_lru,
            "held": list(self.held),
            "host_record": self.hardware.host_record,
        }


def _identifiable(points: Sequence[Point]) -> tuple[str, ...]:
    """The machine terms the runs can pin down: CPU rate needs a host layer off the pool, uploads and the
    per-layer cost need cached runs (two budgets to tell them apart), the fixed cost a run with every expert
    on the GPU (else it is confounded with the CPU and per-layer costs)."""
    terms = []
    if any(not p.layout.host_layers for p in points):
        terms.append("token_ms")
    if any(not p.traffic.cached.all() and p.layout.host_layers for p in points):
        terms.append("cpu_expert_gbs")
    cached = {p.scenario.budget_mib for p in points if p.traffic.cached.any()}
    if cached:
        pinned = all(p.scenario.pinned for p in points if p.traffic.cached.any())
        terms.append("pinned_gbs" if pinned else "pageable_gbs")
    if len(cached) >= 2:
        terms.append("sync_us")
    return tuple(terms)


def _fit_machine(points: Sequence[Point], hw: Hardware, params: TimeParams, terms: Sequence[str]) -> Hardware:
    """The machine with `terms` fitted to the points, each starting from the value the time model gives it; a term
    not fitted keeps the machine's own where it has one (a host record's CPU rate at the record's threads)."""
    starts = {
        "cpu_expert_gbs": cpu_expert_gbs(hw, params, pinned=False),
        "sync_us": params.sync_us(hw),
        "token_ms": params.token_ms_of(hw),
        "pinned_gbs": upload_gbs(hw, params, pinned=True),
        "pageable_gbs": upload_gbs(hw, params, pinned=False),
    }
    start = hw.with_changes(**{k: v for k, v in starts.items() if k in terms or getattr(hw, k) is None})
    bounds = MACHINE_BOUNDS | {"sync_us": (5.0, 5000.0), "token_ms": (0.05, 50.0)}
    bounds = {k: (lo, min(hi, hw.line_gbs)) if k.endswith("_gbs") and k != "cpu_expert_gbs" else (lo, hi)
              for k, (lo, hi) in bounds.items()}  # fmt: skip
    weights = {p.name: 1.0 for p in points}
    return _fit_fields(start, tuple(terms), bounds, lambda h: decode_errors(points, params, h), weights)


def _one_load_mode(points: Sequence[Point]) -> str:
    modes: dict[str, list[str]] = {}
    for p in points:
        modes.setdefault(p.scenario.load_mode, []).append(p.name)
    if len(modes) > 1:
        listed = "; ".join(f"{mode}: {', '.join(names[:3])}" for mode, names in modes.items())
        raise MoeModelError(f"runs of several load modes ({listed}): calibrate one load mode at a time")
    return next(iter(modes))


def _quantile(errors: Sequence[float]) -> float | None:
    return float(np.quantile(np.abs(errors), UNCERTAINTY_QUANTILE)) if len(errors) else None


def _left_out(points: Sequence[Point], hw: Hardware, params: TimeParams, terms: Sequence[str]):
    """Each run predicted by a fit on the others, and the runs that can judge the fit (a run that alone
    pins a term cannot check it: reported, not judged)."""
    left_out, checkable = {}, []
    for p in points:
        others = [q for q in points if q is not p]
        sub_terms = [t for t in terms if t in _identifiable(others)]
        left_out |= decode_errors([p], params, _fit_machine(others, hw, params, sub_terms or terms))
        if len(sub_terms) == len(terms):
            checkable.append(p.name)
    return left_out, checkable


def _reason(n_runs: int, judged: Sequence[str], worst: float, wide: bool, concurrent: Sequence[float]) -> str:
    if n_runs < 3:
        return f"not trusted: {n_runs} runs, 3+ needed"
    if not judged:
        return "not trusted: each run alone pins a fitted term, so no run checks the others; add one at another budget"
    if worst > MAX_MACHINE_ERROR:
        return (
            f"not trusted: worst left-out error {100 * worst:+.0f} % over the {len(judged)} runs the others can "
            f"check (at most {100 * MAX_MACHINE_ERROR:.0f} % allowed)"
        )
    if wide:
        return f"not trusted: predictions would carry more than ±{100 * MAX_MACHINE_REL_ERROR:.0f} %"
    if not concurrent:
        return "accepted"
    return (
        f"accepted; the runs with concurrent streams, predicted by this fit of the one-stream runs: worst "
        f"{100 * max(concurrent, key=abs):+.0f} %, the range concurrent predictions carry"
    )


def calibrate_machine(
    points: Sequence[Point],
    hw: Hardware,
    params: TimeParams,
    runs: Sequence[LoggedRun] = (),
    held: Sequence[str] = (),
) -> MachineFit:
    """Fit this machine's own terms on its runs; each run's error when it was left out; refuse if untrusted.

    With two or more one-stream runs, those are fitted and judge the fit; runs with concurrent streams are
    predicted at their concurrency by that fit (which never saw them) and their errors give the range of
    concurrent predictions: the time model prices concurrency with global parameters, and one regime's misfit
    must not bend the other's terms. Without them every run is fitted and judged alike. The `held` terms are not
    fitted: the machine's own values stand (a host record's measurement)."""
    points = [p for p in points if p.decode_tps]
    if len(points) < 2:
        raise MoeModelError(f"calibration needs at least 2 runs with decode timings, found {len(points)}")
    if len({p.name for p in points}) < len(points):
        raise MoeModelError("two runs have the same name: give each log once, by its path")
    load_mode = _one_load_mode(points)
    single = [p for p in points if p.scenario.concurrency == 1]
    fitted_on = single if len(single) >= 2 else points
    terms = tuple(t for t in _identifiable(fitted_on) if t not in held)
    if not terms:
        why = "the host record measured the CPU rate they show" if held else "no host layers off the cache"
        raise MoeModelError(f"these runs cannot tell the machine's rates apart ({why})")
    fitted = _fit_machine(fitted_on, hw, params, terms)
    errors = decode_errors(points, params, fitted)
    left_out, judged = _left_out(fitted_on, hw, params, terms)
    concurrent = [errors[p.name] for p in points if p not in fitted_on]
    left_out |= {p.name: errors[p.name] for p in points if p not in fitted_on}  # the fit never saw them
    worst = max((abs(left_out[name]) for name in judged), default=0.0)
    rel_error, rel_concurrent = _quantile([left_out[p.name] for p in fitted_on]) or 0.0, _quantile(concurrent)
    wide = max(rel_error, rel_concurrent or 0.0) > MAX_MACHINE_REL_ERROR
    accepted = bool(len(points) >= 3 and judged and worst <= MAX_MACHINE_ERROR and not wide)
    shared = [next((getattr(r, a) for r in runs if getattr(r, a) is not None), None) for a in ("gpu", "model", "build")]
    return MachineFit(
        fitted, terms, errors, left_out, tuple(judged), rel_error, accepted,
        _reason(len(points), judged, worst, wide, concurrent), load_mode, rel_concurrent, tuple(runs), *shared,
        points[0].engine, held=tuple(held),
    )  # fmt: skip


def calibrate_logs(
    logs: Sequence[tuple[str, list[LogRun]]],
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    build: int | None,
    held: Sequence[str] = (),
) -> MachineFit:
    """`calibrate` (and the Logs page's): the runs checked, the machine fitted (but the `held` terms a host record
    measured), and for b12170+ runs the ClassLRU reading nearest their logged hit rates (log_reading), which the
    machine file keeps."""
    points, runs = machine_points(logs, model, hw, build)
    result = calibrate_machine(points, hw, params, runs, held)
    pick = reading_from_logs(model, logs, hw, build)
    return replace(result, class_lru=pick.as_dict() if pick else None)


# --- the machine file ---


@dataclass(frozen=True)
class MachineFile:
    """A machine file read back: the machine, what it was fitted on and the error its predictions carry."""

    path: str
    hardware: Hardware
    rel_error: float
    rel_error_concurrent: float | None
    load_mode: str
    gpu: str | None
    model: str | None
    build: int | None
    class_lru_reading: tuple[tuple[str, str], ...] = ()  # the reading its b12170+ logs picked (Scenario's)

    def rel_error_at(self, concurrency: int) -> float:
        """A prediction's range: the left-out error of the runs of its kind (one stream, or several streams
        when the logs had such runs)."""
        if concurrency > 1 and self.rel_error_concurrent is not None:
            return self.rel_error_concurrent
        return self.rel_error


def save_machine(fit_: MachineFit, path: str | Path) -> None:
    """The machine file written whole or not at all: a full disk leaves the previous one as it was."""
    write_text_atomic(path, json.dumps(fit_.as_dict(), indent=1, allow_nan=False) + "\n")


def _read_regular(path: str | Path, limit: int) -> bytes:
    """A regular file's bytes, at most `limit`: a device, a FIFO or a directory is refused before any read."""
    try:
        fd = os.open(path, os.O_RDONLY | os.O_NONBLOCK)  # a plain open of a FIFO would wait for a writer
    except OSError as err:
        raise MachineFileError(f"{path}: {err.strerror}") from None
    try:
        info = os.fstat(fd)
        if not stat.S_ISREG(info.st_mode):
            raise MachineFileError(f"{path}: not a regular file, so not a machine file")
        chunks, size = [], 0
        while size <= limit and (chunk := os.read(fd, limit + 1 - size)):
            chunks.append(chunk)
            size += len(chunk)
    finally:
        os.close(fd)
    if size > limit:
        raise MachineFileError(f"{path}: larger than this tool's limit of {limit:,} bytes for a machine file")
    return b"".join(chunks)


def _kinds(hint) -> tuple[tuple[type, ...], bool]:
    """The JSON types a field of this annotation takes, and whether it may be null."""
    args = typing.get_args(hint) or (hint,)
    optional = type(None) in args
    kinds = tuple(k for a in args if a is not type(None) for k in ((int, float) if a is float else (a,)))
    return kinds, optional


def _value(record: dict, key: str, hint, where: str):
    """record[key] checked against a type annotation: JSON type, finite, text length; one line naming it."""
    kinds, optional = _kinds(hint)
    if key not in record:
        raise MachineFileError(f"{where}: no {key!r}: not a machine file written by this calibrate; calibrate again")
    value = record[key]
    if value is None and optional:
        return None
    if isinstance(value, bool) != (bool in kinds) or not isinstance(value, kinds):
        label = {float: "number", int: "number" if float in kinds else "integer"}
        names = " or ".join(dict.fromkeys(label.get(k, k.__name__) for k in kinds))
        raise MachineFileError(f"{where}: {key} must be {names}{' or null' if optional else ''}, got {value!r:.40}")
    if isinstance(value, float) and not math.isfinite(value):
        raise MachineFileError(f"{where}: {key} is {value}: it must be a finite number")
    if isinstance(value, str) and len(value) > MAX_MACHINE_TEXT_CHARS:
        raise MachineFileError(f"{where}: {key} is longer than {MAX_MACHINE_TEXT_CHARS:,} characters")
    return value


def _in_range(value, lo, hi, key: str, where: str):
    if value is not None and not lo <= value <= hi:
        raise MachineFileError(f"{where}: {key} is {value!r:.40}: it must be in {lo:,}..{hi:,}")
    return value


def _dataclass(cls, record, where: str):
    """One of our frozen dataclasses from a JSON object: every field typed, no unknown one."""
    if not isinstance(record, dict):
        raise MachineFileError(f"{where}: expected an object, got {type(record).__name__}")
    hints = typing.get_type_hints(cls)
    if unknown := sorted(set(record) - set(hints)):
        raise MachineFileError(f"{where}: unknown field {unknown[0]!r:.60}")
    values = {}
    for f in fields(cls):
        if f.name in record or (f.default is MISSING and f.default_factory is MISSING):
            hint = hints[f.name]
            if is_dataclass(hint):  # a nested object (the machine's host)
                values[f.name] = _dataclass(hint, record.get(f.name), f"{where}: {f.name}")
            elif typing.get_origin(hint) is tuple:  # a list of names (the host's stated figures)
                items = _value(record, f.name, list, where)
                if len(items) > MAX_MACHINE_RUNS or not all(isinstance(i, str) for i in items):
                    raise MachineFileError(f"{where}: {f.name} must be a short list of names")
                values[f.name] = tuple(items)
            else:
                values[f.name] = _value(record, f.name, hint, where)
    try:
        return cls(**values)
    except MoeModelError as err:
        raise MachineFileError(f"{where}: {err}") from None


def _errors(record: dict, key: str, where: str) -> dict[str, float]:
    errors = _value(record, key, dict, where)
    if len(errors) > MAX_MACHINE_RUNS:
        raise MachineFileError(f"{where}: {key} holds more than {MAX_MACHINE_RUNS:,} runs")
    for name in errors:
        if len(name) > MAX_MACHINE_TEXT_CHARS:
            raise MachineFileError(f"{where}: {key} names a run longer than {MAX_MACHINE_TEXT_CHARS:,} characters")
        _in_range(_value(errors, name, float, f"{where}: {key}"), -1.0, math.inf, name, f"{where}: {key}")
    return errors


def _runs(record: dict, where: str) -> tuple[LoggedRun, ...]:
    listed = _value(record, "runs", list, where)
    if len(listed) > MAX_MACHINE_RUNS:
        raise MachineFileError(f"{where}: more than {MAX_MACHINE_RUNS:,} runs")
    runs = tuple(_dataclass(LoggedRun, r, f"{where}: runs[{i}]") for i, r in enumerate(listed))
    for i, run in enumerate(runs):
        at = f"{where}: runs[{i}]"
        _in_range(run.concurrency, 1, MAX_CONCURRENCY, "concurrency", at)
        _in_range(run.requests, 0, MAX_RUN_REQUESTS, "requests", at)
        _in_range(run.build, 1, MAX_BUILD, "build", at)
        if run.load_mode not in LOAD_MODES:
            raise MachineFileError(f"{at}: load_mode {run.load_mode!r:.40} is none of {', '.join(LOAD_MODES)}")
    return runs


def load_machine(path: str | Path) -> MachineFile:
    """A machine file written by `calibrate`, checked field by field; refused if its fit was refused."""
    where = str(path)
    try:
        record = json.loads(_read_regular(path, MAX_MACHINE_FILE_BYTES))
    except (UnicodeDecodeError, ValueError, RecursionError) as err:
        raise MachineFileError(f"{where}: not a machine file written by `calibrate` ({type(err).__name__})") from None
    if not isinstance(record, dict):
        raise MachineFileError(f"{where}: not a machine file written by `calibrate` (not a JSON object)")
    reason = _value(record, "reason", str, where)
    if not _value(record, "accepted", bool, where):
        raise MachineFileError(f"{where}: this machine fit was refused ({reason:.200}); calibrate again")
    hardware = _dataclass(Hardware, record.get("hardware"), f"{where}: hardware")
    rel_error = _in_range(_value(record, "rel_error", float, where), 0.0, MAX_MACHINE_REL_ERROR, "rel_error", where)
    concurrent = _value(record, "rel_error_concurrent", float | None, where)
    _in_range(concurrent, 0.0, MAX_MACHINE_REL_ERROR, "rel_error_concurrent", where)
    load_mode = _value(record, "load_mode", str, where)
    if load_mode not in LOAD_MODES:
        raise MachineFileError(f"{where}: load_mode {load_mode!r:.40} is none of {', '.join(LOAD_MODES)}")
    fitted = _value(record, "fitted", list, where)
    if not all(isinstance(t, str) for t in fitted) or not set(fitted) <= set(FITTED_TERMS):
        raise MachineFileError(f"{where}: fitted must list terms among {', '.join(FITTED_TERMS)}")
    errors = _errors(record, "fit_errors", where)
    if set(_errors(record, "left_out_errors", where)) != set(errors):
        raise MachineFileError(f"{where}: fit_errors and left_out_errors name different runs")
    judged = _value(record, "judged", list, where)
    if not all(isinstance(name, str) for name in judged) or not set(judged) <= set(errors):
        raise MachineFileError(f"{where}: judged names a run with no errors")
    _runs(record, where)
    build = _in_range(_value(record, "build", int | None, where), 1, MAX_BUILD, "build", where)
    gpu, model = (_value(record, key, str | None, where) for key in ("gpu", "model"))
    reading = _reading(record.get("class_lru_reading"), where)
    return MachineFile(where, hardware, rel_error, concurrent, load_mode, gpu, model, build, reading)


def _reading(reading, where: str) -> tuple[tuple[str, str], ...]:
    """The ClassLRU reading a machine file records (absent or null: none), each knob one of its readings."""
    if reading is None:
        return ()
    if not isinstance(reading, dict) or set(reading) != set(READING_CHOICES):
        raise MachineFileError(f"{where}: class_lru_reading must name each of {', '.join(READING_CHOICES)}")
    for knob, value in reading.items():
        if value not in READING_CHOICES[knob]:
            raise MachineFileError(f"{where}: class_lru_reading {knob} must be one of {READING_CHOICES[knob]}")
    return tuple((knob, reading[knob]) for knob in READING_CHOICES)
