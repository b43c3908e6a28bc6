"""Compare placements, budgets and CPU shares for a model on a machine; return the best with its command line."""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass, replace

import numpy as np

from moe_model.hardware import Hardware
from moe_model.model_spec import ModelSpec
from moe_model.slot_plan import Placement, min_budget_mib
from moe_model.timing import Prediction, Scenario, TimeParams, predict, resolve, traffic_from_workload
from moe_model.vram import fit_host_layers, max_budget_mib
from moe_model.workload import Workload

CPU_SHARES = (0.5, 0.95)
N_BUDGETS = 6


@dataclass(frozen=True, eq=False)
class Option:
    label: str
    prediction: Prediction
    command: str

    def as_dict(self) -> dict:
        p = self.prediction
        return {
            "label": self.label,
            "decode_tps": p.decode_tps,
            "prefill_tps": p.prefill_tps,
            "hit_rate": p.hit_rate,
            "starts": p.starts,
            "fits_vram": p.vram.fits,
            "vram_free_mib": p.vram.free_mib,
            "command": self.command,
            "scenario": p.as_dict()["scenario"],
        }


def command_line(model_path: str, sc: Scenario, host_layers: int) -> str:
    """The llama-server command for a scenario (-lv 4 so the user can verify slots and hit rates)."""
    parts = ["llama-server", "-m", model_path]
    if sc.placement == "cpu-moe":
        parts.append("--cpu-moe")
    elif sc.placement.startswith("n-cpu-moe:"):
        parts += ["--n-cpu-moe", sc.placement.split(":", 1)[1]]
    elif sc.placement == "fit":
        parts.append(f"--fit on  # keeps ~{host_layers} layers' experts in RAM")
    if sc.budget_mib:
        parts += ["--moe-cache-mib", str(sc.budget_mib)]
    if sc.cpu_share:
        parts += ["--moe-cache-cpu-share", f"{sc.cpu_share:g}"]
    parts += ["-c", str(sc.n_ctx), "-np", str(sc.concurrency)]
    if sc.draft_tokens:
        parts += ["--draft-max", str(sc.draft_tokens)]
    return " ".join(parts + ["-lv", "4"])


def candidates(model: ModelSpec, hw: Hardware, base: Scenario) -> list[Scenario]:
    """--fit, --fit with a 10 % cache, --cpu-moe over budgets, --n-cpu-moe K + budget, CPU shares."""
    out = [replace(base, placement="fit", budget_mib=0, cpu_share=0.0)]
    k_fit = fit_host_layers(model, hw, 0, base.n_ctx)
    host_mib = sum(layer.expert_bytes_total for layer in model.layers[:k_fit]) / 2**20
    if k_fit and min_budget_mib(model, Placement(cpu_moe=False, n_cpu_moe=k_fit)):
        out.append(replace(base, placement="fit", budget_mib=max(int(host_mib * 0.1), 1), cpu_share=0.0))
    cpu_moe = Placement(cpu_moe=True)
    lo, hi = min_budget_mib(model, cpu_moe) or 0, max_budget_mib(model, hw, cpu_moe, base.n_ctx)
    budgets = sorted({int(b) for b in np.geomspace(max(lo, 1), max(hi, lo, 1), N_BUDGETS)} | {0})
    out += [replace(base, placement="cpu-moe", budget_mib=b, cpu_share=0.0) for b in budgets if b == 0 or b >= lo]
    for k in sorted({max(1, k_fit), (k_fit + model.n_layer) // 2}):
        placement = Placement(cpu_moe=False, n_cpu_moe=k)
        budget, lowest = max_budget_mib(model, hw, placement, base.n_ctx), min_budget_mib(model, placement)
        if lowest and budget >= lowest:
            out.append(replace(base, placement=f"n-cpu-moe:{k}", budget_mib=budget, cpu_share=0.0))
    for b in (hi, max(lo, hi // 2)):
        if b >= lo > 0:
            out += [replace(base, placement="cpu-moe", budget_mib=b, cpu_share=f) for f in CPU_SHARES]
    return out


def label(sc: Scenario, host_layers: int) -> str:
    name = {"cpu-moe": "--cpu-moe", "fit": f"--fit ({host_layers} layers' experts in RAM)"}.get(
        sc.placement, sc.placement.replace("n-cpu-moe:", "--n-cpu-moe ")
    )
    cache = f" + {sc.budget_mib} MiB cache" if sc.budget_mib else " (no cache)"
    share = f", CPU share {sc.cpu_share:g}" if sc.cpu_share else ""
    return name + cache + share


def recommend(
    model: ModelSpec,
    hw: Hardware,
    params: TimeParams,
    base: Scenario,
    workload_for: Callable[[Scenario], Workload],
    model_path: str,
    progress=None,
) -> list[Option]:
    """Every candidate's prediction, best first (those that start and fit the GPU's memory)."""
    options = []
    scenarios = candidates(model, hw, base)
    for i, sc in enumerate(scenarios):
        layout = resolve(model, hw, sc)
        traffic = traffic_from_workload(model, layout, sc, workload_for(sc)) if layout.plan.starts else None
        pred = predict(model, hw, params, sc, traffic, layout=layout)
        options.append(
            Option(label(sc, len(layout.host_layers)), pred, command_line(model_path, sc, len(layout.host_layers)))
        )
        if progress:
            progress((i + 1) / len(scenarios))
    ok = [o for o in options if o.prediction.starts and o.prediction.vram.fits]
    rest = [o for o in options if o not in ok]
    return sorted(ok, key=lambda o: -o.prediction.decode_tps) + rest


def best_per_card(
    model: ModelSpec,
    cards: list[Hardware],
    base: Scenario,
    work: Workload,
    curve: list,
    model_path: str,
    params_of: Callable[[str], TimeParams],
) -> list[dict]:
    """Per card: the fastest --cpu-moe budget of a precomputed hit-rate curve that fits, against --fit and
    --cpu-moe without a cache; marks cards where the cache is a net loss."""
    from moe_model.timing import decode_ubatches, traffic_from_simulation

    n_ub = decode_ubatches(work)
    rows = []
    for hw in cards:
        params = params_of(hw.name)
        no_cache = {
            "--fit (no cache)": predict(model, hw, params, replace(base, placement="fit", budget_mib=0)),
            "--cpu-moe (no cache)": predict(model, hw, params, replace(base, placement="cpu-moe", budget_mib=0)),
        }
        best_name, best = None, None
        for r in curve:
            sc = replace(base, placement="cpu-moe", budget_mib=r.budget_mib)
            layout = resolve(model, hw, sc)
            if not (layout.plan.starts and layout.vram.fits):
                continue
            traffic = traffic_from_simulation(model, layout, sc, r.layer_hits, r.layer_lookups, n_ub, "simulated")
            pred = predict(model, hw, params, sc, traffic, layout=layout)
            if best is None or pred.decode_tps > best.decode_tps:
                best_name, best = f"--cpu-moe + {r.budget_mib} MiB", pred
        fitting = {k: v for k, v in no_cache.items() if v.vram.fits}
        baseline_name, baseline = max(fitting.items(), key=lambda kv: kv[1].decode_tps) if fitting else (None, None)
        winner_name, winner = (
            (best_name, best)
            if best and (not baseline or best.decode_tps >= baseline.decode_tps)
            else (baseline_name, baseline)
        )
        if winner is None:
            rows.append({"gpu": hw.name, "setting": "nothing fits", "decode_tps": 0.0})
            continue
        rows.append(
            {
                "gpu": hw.name,
                "link": f"{hw.pcie_label}, {'pinned' if hw.pinned else 'pageable'}",
                "setting": winner_name,
                "decode_tps": winner.decode_tps,
                "prefill_tps": winner.prefill_tps,
                "vram_free_mib": winner.vram.free_mib,
                "no_cache_tps": baseline.decode_tps if baseline else None,
                "best_cache_tps": best.decode_tps if best else None,
                "cache_is_net_loss": bool(best and baseline and best.decode_tps < baseline.decode_tps),
                "fits_without_offload": bool(baseline and not baseline.layout.host_layers),
                "command": command_line(model_path, winner.scenario, len(winner.layout.host_layers)),
            }
        )
    return rows
