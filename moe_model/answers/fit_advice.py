"""What would fit: when a setting does not fit the GPU's memory or the host's RAM, the smallest change of each
kind that makes it fit (more RAM, a smaller budget, `--n-cpu-moe K`, a shorter context, a q8_0 KV cache).

Every change is checked with the same VRAM and RAM accounting the verdicts use (vram.breakdown,
host_memory), one knob at a time from the setting as given; none is a prediction of speed.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, replace

from moe_model.answers.recommend import Option
from moe_model.limits import MIN_ADVICE_CTX
from moe_model.llama.builds import has_cpu_share
from moe_model.llama.slot_plan import Placement, min_budget_mib
from moe_model.policies.cpu_share import share_note
from moe_model.readers.model_spec import ModelSpec
from moe_model.speed.hardware import Hardware
from moe_model.speed.host_memory import HostMemory
from moe_model.speed.scenario import Layout, Scenario, context_for_depth, resolve
from moe_model.speed.streams import speed_note
from moe_model.speed.time_model import Prediction
from moe_model.speed.vram import kv_bytes_per_elem

CTX_STEP = 256  # llama.cpp pads the context to a multiple of 256 cells
SMALL_KV = "q8_0"
# kinds, the order a summary prefers them in: flags of the same machine first, hardware last
KINDS = ("kv_cache", "context", "budget", "n_cpu_moe", "ram")


@dataclass(frozen=True)
class FitCheck:
    """Whether a setting fits the GPU's memory and the host's RAM, with both accounts."""

    layout: Layout

    @property
    def host(self) -> HostMemory:
        return self.layout.ram

    @property
    def starts(self) -> bool:
        return self.layout.plan.starts

    @property
    def fits(self) -> bool:
        return self.starts and self.layout.vram.fits and self.host.fits


def check_fit(model: ModelSpec, hw: Hardware, sc: Scenario) -> FitCheck:
    return FitCheck(resolve(model, hw, sc))


def run_state(pred: Prediction, host: HostMemory | None) -> str:
    """What a setting does, said before how fast: 'does not start', 'does not fit', 'streams from disk' or
    'fits', each with its figure. predict's first line and recommend's summary lead with it."""
    vram = pred.vram
    if not pred.starts:
        return f"does not start: {pred.error}"
    if not (vram.fits or vram.tight):
        return f"does not fit: {vram.over_mib:,.0f} MiB over the GPU's memory (no speed shown)"
    if host is not None and not host.runs:
        return host.verdict
    if host is not None and host.streams:
        return (
            f"streams from disk: {host.needed_gib:,} GiB of RAM would end it (the machine has "
            f"{host.ram_mib / 1024:g} GiB); its speed prices the drive's reads (the disk term, a model)"
        )
    said = f"fits: {vram.free_mib:,.0f} MiB of VRAM free"
    said += (
        f" (too close to call: it leaves less than llama.cpp's {vram.margin_mib:,.0f} MiB margin)" if vram.tight else ""
    )
    if host is None:
        return said
    if not host.ram_stated:
        return f"{said}; RAM not stated: it needs {host.needed_gib:,} GiB"
    return f"{said}; {host.needed_gib:,} of {host.ram_mib / 1024:g} GiB of RAM used"


@dataclass(frozen=True)
class FitChange:
    """The smallest change of one kind that makes a setting fit; ram_gib: RAM it still needs beyond the machine's
    (None when the changed setting fits the RAM as it is)."""

    kind: str
    text: str
    scenario: Scenario
    placement: Placement  # as llama.cpp resolves it (--fit turned into its layer count)
    ram_gib: int | None = None

    @property
    def fits_alone(self) -> bool:
        """The change alone makes the setting fit (no RAM to add)."""
        return self.ram_gib is None or self.kind == "ram"

    def as_dict(self) -> dict:
        sc = self.scenario
        return {
            "kind": self.kind,
            "text": self.text,
            "fits_alone": self.fits_alone,
            "ram_gib": self.ram_gib,
            "placement": self.placement.text,
            "flags": self.placement.flags(),
            "budget_mib": sc.budget_mib,
            "n_ctx": sc.n_ctx,
            "cache_type_k": sc.cache_type_k,
            "cache_type_v": sc.cache_type_v,
        }


def _largest(lo: int, hi: int, ok: Callable[[int], bool]) -> int | None:
    """The largest v in [lo, hi] with ok(v), for ok true below some value and false above; None if ok(lo) fails."""
    if not ok(lo):
        return None
    while lo < hi:
        mid = (lo + hi + 1) // 2
        lo, hi = (mid, hi) if ok(mid) else (lo, mid - 1)
    return lo


def _vram_fits(model: ModelSpec, hw: Hardware, sc: Scenario) -> bool:
    layout = resolve(model, hw, sc)
    return layout.plan.starts and layout.vram.fits


def _change(model, hw, kind: str, sc: Scenario, what: str) -> FitChange | None:
    """A VRAM-side change, if the changed setting fits the GPU; with the RAM it needs when the machine's is short."""
    check = check_fit(model, hw, sc)
    if not (check.starts and check.layout.vram.fits):
        return None
    ram = None if check.host.fits else check.host.needed_gib
    text = f"{what}: {check.layout.vram.free_mib:,.0f} MiB of VRAM left"
    text += f", with {ram} GiB of RAM (the machine has {hw.ram_gib:g})" if ram else ""
    return FitChange(kind, text, sc, check.layout.placement, ram)


def _smaller_budget(model, hw, sc: Scenario) -> FitChange | None:
    if not sc.budget_mib:
        return None
    budget = _largest(0, sc.budget_mib - 1, lambda b: _vram_fits(model, hw, sc.with_budget(b)))
    if budget is None:
        return None
    start = min_budget_mib(model, resolve(model, hw, sc.with_budget(budget)).placement) or 0
    if 0 < budget < start:
        budget = 0  # fits, but too few slots for one token: llama-server would refuse to start
    what = f"--moe-cache-mib {budget} (from {sc.budget_mib})" if budget else "no cache (drop --moe-cache-mib)"
    return _change(model, hw, "budget", sc.with_budget(budget), what)


def _n_cpu_moe(model, hw, sc: Scenario, layout: Layout) -> FitChange | None:
    """The --n-cpu-moe K nearest the current host layers whose setting fits the GPU and the RAM: more layers in
    RAM free VRAM, fewer free RAM."""
    resolved = layout.placement  # --fit turned into its K
    current = model.n_layer if resolved.cpu_moe else resolved.n_cpu_moe
    p = sc.placement
    for k in sorted(range(model.n_layer + 1), key=lambda k: (abs(k - current), -k)):
        if k == current:
            continue
        placement = Placement(
            cpu_moe=False, n_cpu_moe=k, n_gpu_layers=p.n_gpu_layers, n_gpus=p.n_gpus, tensor_split=p.tensor_split
        )
        changed = replace(sc, placement=placement)
        if check_fit(model, hw, changed).fits:
            return _change(model, hw, "n_cpu_moe", changed, f"--n-cpu-moe {k} (from {layout.placement.label})")
    return None


def _shorter_context(model, hw, sc: Scenario) -> FitChange | None:
    """The longest context that fits, never shorter than MIN_ADVICE_CTX or than every stream at the depth needs."""
    shortest = context_for_depth(MIN_ADVICE_CTX, sc.context_depth, sc.concurrency)
    steps = _largest(
        -(-shortest // CTX_STEP),
        (sc.n_ctx - 1) // CTX_STEP,
        lambda s: _vram_fits(model, hw, replace(sc, n_ctx=s * CTX_STEP)),
    )
    if steps is None or steps * CTX_STEP >= sc.n_ctx:
        return None
    n_ctx = steps * CTX_STEP
    return _change(model, hw, "context", replace(sc, n_ctx=n_ctx), f"-c {n_ctx} (from {sc.n_ctx})")


def _smaller_kv(model, hw, sc: Scenario) -> FitChange | None:
    small = kv_bytes_per_elem(SMALL_KV)
    if all(kv_bytes_per_elem(t) <= small for t in sc.kv_types):
        return None
    changed = replace(sc, cache_type_k=SMALL_KV, cache_type_v=SMALL_KV)
    what = f"-ctk {SMALL_KV} -ctv {SMALL_KV} (a KV cache about half of f16's; a quantized V cache needs -fa on)"
    return _change(model, hw, "kv_cache", changed, what)


def would_fit(model: ModelSpec, hw: Hardware, sc: Scenario) -> list[FitChange]:
    """The smallest change of each kind that makes the setting fit, those that fit alone first; [] if it fits.

    RAM: whole GiB the setting needs, when only the RAM is short. Budget: the largest that fits (or none).
    --n-cpu-moe K: the nearest K that fits both. Context: the longest (multiple of 256, >= MIN_ADVICE_CTX and
    what every stream at the depth needs).
    KV cache: q8_0 K and V. The VRAM-side changes say how much RAM they still need when the machine's is short.
    """
    check = check_fit(model, hw, sc)
    if check.fits:
        return []
    changes: list[FitChange | None] = []
    if check.starts and check.layout.vram.fits:
        ram = check.host.needed_gib
        experts = check.host.experts_mib / 1024
        setting = check.layout.placement.label + (f" + {sc.budget_mib} MiB cache" if sc.budget_mib else "")
        text = f"{ram} GiB of RAM for {setting} ({experts:,.1f} GiB of it host experts), the machine has "
        text += f"{hw.ram_gib:g}"
        changes.append(FitChange("ram", text, sc, check.layout.placement, ram))
    else:
        changes += [_smaller_kv(model, hw, sc), _shorter_context(model, hw, sc), _smaller_budget(model, hw, sc)]
    changes.append(_n_cpu_moe(model, hw, sc, check.layout))
    found = [c for c in changes if c is not None]
    return sorted(found, key=lambda c: (not c.fits_alone, KINDS.index(c.kind), c.ram_gib or 0))


def smallest_change(changes: Sequence[FitChange]) -> FitChange | None:
    """The change a summary names: one that fits alone (flags of this machine before more RAM), else the one
    needing the least RAM."""
    return min(changes, key=lambda c: (not c.fits_alone, c.ram_gib or 0, KINDS.index(c.kind)), default=None)


@dataclass(frozen=True)
class Advice:
    """recommend's last word: whether any option fits, the one-line summary, and what would fit if none does."""

    fits: bool
    summary: str
    would_fit: tuple[FitChange, ...] = ()


def _merged(changes: Sequence[FitChange]) -> list[FitChange]:
    """One change per kind: the first that fits alone, else the one needing the least RAM."""
    best: dict[str, FitChange] = {}
    for c in changes:
        kept = best.get(c.kind)
        if kept is None or (c.fits_alone, -(c.ram_gib or 0)) > (kept.fits_alone, -(kept.ram_gib or 0)):
            best[c.kind] = c
    return sorted(best.values(), key=lambda c: (not c.fits_alone, KINDS.index(c.kind), c.ram_gib or 0))


def recommend_advice(model: ModelSpec, hw: Hardware, options: Sequence[Option]) -> Advice:
    """The summary of a ranked recommendation; when no option fits, the smallest changes that would make one fit,
    searched from each candidate placement without a cache (the least VRAM that placement can use)."""
    usable = [o for o in options if o.usable]
    if usable:
        best, streaming = usable[0], sum(o.host is not None and o.host.streams for o in usable)
        p = best.prediction
        return Advice(
            True,
            f"{run_state(p, best.host)}; best: {best.label}, {p.decode_tps:.1f} t/s predicted (a model)"
            f"{speed_note(p.decode_tps, p.scenario.concurrency)}; {len(usable)} of {len(options)} settings run on "
            f"{hw.name}" + (f", {streaming} of them streaming from disk" if streaming else ""),
        )
    bases = {(o.prediction.layout.placement, o.prediction.scenario.load_mode): o for o in options}
    changes = _merged([c for o in bases.values() for c in would_fit(model, hw, o.prediction.scenario.with_budget(0))])
    where = f"{hw.name} ({hw.vram_gib:g} GB) with {ram_words(hw)}"
    first = smallest_change(changes)
    if first is None:
        return Advice(
            False,
            f"nothing fits {where}: no single change of KV cache, context, budget, --n-cpu-moe or RAM makes a setting "
            "fit (a smaller quantization or a larger GPU would)",
        )
    return Advice(False, f"nothing fits {where}; the smallest change that fits: {first.text}", tuple(changes))


# --- Shopping: one verdict per question (issue 32) ---


@dataclass(frozen=True)
class CardAnswer:
    """One card's ranked options in the user's host and recommend's last word on them."""

    hardware: Hardware
    options: tuple[Option, ...]
    advice: Advice

    @property
    def best(self) -> Option | None:
        """The fastest option that runs (starts, fits VRAM and RAM), else None."""
        return next((o for o in self.options if o.usable), None)

    @property
    def fit_line(self) -> str | None:
        """What would let this card run, for a card with nothing that fits (the summary's change); for one whose
        best setting streams its mmap'd experts from disk, the RAM that would end it."""
        if self.best is not None:
            return f"{self.hardware.name}: {self.streaming_note}" if self.streaming_note else None
        first = smallest_change(self.advice.would_fit)
        return f"{self.hardware.name}: {first.text if first else self.advice.summary}"

    @property
    def streaming_note(self) -> str | None:
        """'streams its experts from disk (N GiB of RAM would end it)' where the best setting does, else None."""
        if self.best is None or not self.best.host.streams:
            return None
        return f"streams its experts from disk ({self.best.host.needed_gib} GiB of RAM would end it)"


def card_answer(model: ModelSpec, hw: Hardware, options: Sequence[Option]) -> CardAnswer:
    return CardAnswer(hw, tuple(options), recommend_advice(model, hw, options))


def ram_words(hw: Hardware) -> str:
    """The machine's RAM as a verdict names it: its size where stated, else that nobody stated it (never assumed)."""
    return f"{hw.ram_gib:g} GiB of RAM" if hw.host.ram_stated else "any RAM that holds it (RAM not stated)"


def shopping_share_note(model: ModelSpec, answers: Sequence[CardAnswer], cpu_share: float, build: int) -> str | None:
    """The CPU share's note (where it does not apply, this model), once for every card: where the user's share is
    on (on a build that has it) or a card's pick uses one; None otherwise."""
    picked = any(a.best.prediction.scenario.cpu_share > 0 for a in answers if a.best)
    return share_note(model) if picked or (cpu_share > 0 and has_cpu_share(build)) else None
