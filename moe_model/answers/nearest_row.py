"""The measured row nearest a prediction: same model family, same kind of placement, the nearest card.

A peer (llmfit) shows the community's measurement for matching hardware above its own formula; this puts the
closest of the project's own cited measurements (moe_model/data/reference-measurements.csv and
field-measurements.csv, read as field_rows.csv reads them) beside a prediction, with its measured decode speed.
Rows of another engine ("other: ...") are left out; a fork carrying mainline's cache is kept and named.
"""

from __future__ import annotations

import math
import re
from dataclasses import dataclass
from functools import lru_cache

from moe_model.fits.log_timings import load_reference
from moe_model.fits.points import field_machines, field_rows
from moe_model.limits import MAX_ECHO_CHARS, NEAREST_ROW_SIZE_RATIO
from moe_model.readers.logs import MAINLINE
from moe_model.speed.hardware import PRESETS, Hardware
from moe_model.speed.scenario import Scenario

CACHE, FIT, CPU_MOE, N_CPU_MOE, GPU = "the cache", "--fit", "--cpu-moe", "--n-cpu-moe", "all on the GPU"


@dataclass(frozen=True)
class MeasuredRow:
    """One cited measurement: where it is, the card, model and placement it ran, and its decode t/s."""

    where: str  # "field table row 33", "reference table row t4-cpumoe-10000"
    card: str
    gpu_bw_gbs: float
    vram_gib: float
    model: str
    family: str
    kind: str  # CACHE, FIT, CPU_MOE, N_CPU_MOE or GPU
    budget_mib: int
    decode_tps: float
    source: str  # the row's own citation (an article, a repository path)
    engine: str = MAINLINE

    def sentence(self, model_name: str) -> str:
        """One sentence naming the row and its measured speed; a row of another model of the family says so."""
        cache = f", cache of {self.budget_mib:,} MiB" if self.budget_mib else ""
        other = "" if same_model(self.model, model_name) else " (another model of its family)"
        return (
            f"Nearest measured row: {self.model}{other} on {self.card} ({self.kind}{cache}, {self.engine}) measured "
            f"{self.decode_tps:.1f} t/s decode [measured: {self.where}; source {self.source[:MAX_ECHO_CHARS]}]"
        )

    def as_dict(self, model_name: str) -> dict:
        keys = ("where", "card", "model", "kind", "budget_mib", "decode_tps", "source", "engine")
        same = same_model(self.model, model_name)
        return {k: getattr(self, k) for k in keys} | {
            "basis": "measured",
            "same_model": same,
            "sentence": self.sentence(model_name),
        }


def same_model(row_model: str, model_name: str) -> bool:
    """Whether a row's model (a name or file name) is the model asked about (its name starts the other's)."""
    a, b = row_model.lower(), model_name.lower()
    return a.startswith(b) or b.startswith(a)


def family_of(model_name: str) -> str:
    """A model's family: its name's first word, with a second one where it is a word, not a size or quant
    ('Qwen3-235B-A22B' -> 'qwen3', 'gpt-oss-20b' -> 'gpt-oss', 'Qwen3.8-Flash-Next-IQ3_XXS.gguf' -> 'qwen3.8-flash')."""
    words = re.split(r"[-_ ]", model_name.lower()) + [""]
    second = words[1]
    return f"{words[0]}-{second}" if second.isalpha() and second not in ("ud", "gguf") else words[0]


def size_b(model_name: str) -> float | None:
    """A model's total parameters in billions from its name ('Qwen3-235B-A22B' -> 235; None: the name has none)."""
    found = re.search(r"(?<![a-z0-9.])(\d+(?:\.\d+)?)b(?![a-z])", model_name.lower())
    return float(found.group(1)) if found else None


def comparable(row_model: str, model_name: str) -> bool:
    """Whether a row of the family can stand beside the model: sizes within the ratio limits allows (where named)."""
    a, b = size_b(row_model), size_b(model_name)
    return a is None or b is None or max(a, b) / min(a, b) <= NEAREST_ROW_SIZE_RATIO


def kind_of(placement: str, budget_mib: float) -> str:
    """A row's or a scenario's kind of placement: the cache where it has a budget, else its flags' kind."""
    if budget_mib and budget_mib > 0:
        return CACHE
    text = str(placement)
    for kind, marks in ((FIT, ("fit",)), (N_CPU_MOE, ("n-cpu-moe",)), (CPU_MOE, ("cpu-moe",))):
        if any(m in text for m in marks):
            return kind
    return GPU


def scenario_kind(sc: Scenario) -> str:
    p = sc.placement
    if sc.budget_mib:
        return CACHE
    return FIT if p.fit else CPU_MOE if p.cpu_moe else N_CPU_MOE if p.n_cpu_moe else GPU


def _number(value) -> float | None:
    try:
        number = float(value)
    except (TypeError, ValueError):
        return None
    return number if math.isfinite(number) and number > 0 else None


def _field_rows() -> list[MeasuredRow]:
    machines, rows = field_machines(), []
    for _, r in field_rows().iterrows():
        hw = machines.get(r["hardware"] if isinstance(r["hardware"], str) else r["machine"])
        where = f"field table row {r['row']}"
        row = _row(where, hw, r["model_file"], r["placement"], r["budget_mib"], r["decode_tps"], r)
        rows += [row] if row else []
    return rows


def _reference_rows() -> list[MeasuredRow]:
    rows = []
    for _, r in load_reference().iterrows():
        where, hw = f"reference table row {r['id']}", PRESETS.get(str(r["gpu"]))
        row = _row(where, hw, r["model"], r["placement"], r["moe_cache_mib"], r["decode_tps"], r)
        rows += [row] if row else []
    return rows


def _row(where: str, hw: Hardware | None, model, placement, budget, decode, r) -> MeasuredRow | None:
    """A table row as a MeasuredRow; None where it has no card, model or decode speed, or ran another engine."""
    tps, engine = _number(decode), str(r["engine"])
    if tps is None or hw is None or not isinstance(model, str) or model == "unknown MoE" or engine.startswith("other"):
        return None
    budget_mib = int(_number(budget) or 0)
    source = str(r.get("source_url_or_repo_path", r.get("source")))
    kind = kind_of(placement, budget_mib)
    return MeasuredRow(
        where, hw.name, hw.gpu_bw_gbs, hw.vram_gib, model, family_of(model), kind, budget_mib, tps, source, engine
    )


@lru_cache(maxsize=1)
def measured_rows() -> tuple[MeasuredRow, ...]:
    """Every mainline row with a decode speed, read once."""
    return tuple(_reference_rows() + _field_rows())


def _card_distance(row: MeasuredRow, hw: Hardware) -> float:
    """How far a row's card is from `hw`: memory bandwidth first (decode reads weights), then memory size."""
    return abs(math.log(row.gpu_bw_gbs / hw.gpu_bw_gbs)) + 0.5 * abs(math.log(row.vram_gib / hw.vram_gib))


def nearest_row(model_name: str, sc: Scenario, hw: Hardware) -> MeasuredRow | None:
    """The measured row of the same family, a comparable size and the same kind of placement on the nearest card
    (None: no such row)."""
    family, kind = family_of(model_name), scenario_kind(sc)
    same = [r for r in measured_rows() if r.family == family and r.kind == kind and comparable(r.model, model_name)]
    if not same:
        return None
    return min(same, key=lambda r: (_card_distance(r, hw), abs(r.budget_mib - sc.budget_mib)))
