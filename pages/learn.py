"""Learn: watch the cache work on a toy model, one (layer, ubatch) at a time."""

import time

import streamlit as st

from moe_model.charts import pool_heatmap
from moe_model.llama.pool_rule import OFFLOAD_MIN_BATCH, pool_need
from moe_model.llama.slot_plan import plan_cache
from moe_model.policies import CLASS_LRU, POLICIES, REFERENCE, run_policy
from moe_model.policies.class_lru import HALF_LIFE_TOKENS, N_CLASSES
from moe_model.policies.lazy_unload import idle_limit
from moe_model.policies.stepper import STEPPABLE, Step, class_lru_step, steps
from moe_model.routing.toy import N_EXPERT, toy_model, toy_workload
from ui.sidebar import sidebar_session
from ui.startup import through_app
from ui.widgets import friendly_errors

through_app()  # a link opened on a fresh server runs app.py first (ui.startup)

MAX_TOY_BUDGET = 160


def why(step: Step, k: int, n_slots: int | None) -> str:
    """One line on what llama.cpp did with this (layer, ubatch) and why."""
    need = pool_need(step.n_tokens, k, N_EXPERT)
    if step.path == "CPU":
        return (
            f"CPU: {step.n_tokens} tokens may need {need} distinct experts of this layer, more than the pool's "
            f"{n_slots} slots, so llama.cpp computes them from host memory on the CPU; the pool is left as it was."
        )
    if step.path == "large batch (copy)":
        return (
            f"Large batch: {step.n_tokens} tokens (at least {OFFLOAD_MIN_BATCH}, GGML_OP_OFFLOAD_MIN_BATCH) bypass "
            "the pool: the experts they use are uploaded for this batch, cached ones are copied on the GPU, "
            "and the LRU order does not change."
        )
    if step.path == "not cached":
        return "Not cached: this layer's group got too few slots, so its experts are computed on the CPU."
    return (
        f"Cache: {len(step.hits)} hit(s) move to the end of the LRU order; {len(step.fills)} miss(es) are "
        "uploaded into the slots at its head (least recently used first)."
    )


def pool_budget(concurrency: int, draft: int, mixed: bool, prompt: bool, policy: str, start: int) -> int | None:
    """The smallest toy budget from `start` at which most steps use the pool (the demonstration of users)."""
    work = toy_workload(concurrency, draft, 40 if prompt else 0)
    for budget in range(start, MAX_TOY_BUDGET + 1):
        plan = plan_cache(toy_model(mixed), budget)
        if plan.starts:
            trail = steps(work, plan, N_EXPERT, limit=200, policy=policy)
            if sum(s.path == "cache" for s in trail) > len(trail) / 2:
                return budget
    return None


def set_budget(budget: int) -> None:
    st.session_state["learn_budget"] = budget


def slot_notes(step: Step, gi: int) -> list[str]:
    """ClassLRU: each held slot's class and CRF at its last use."""
    if not step.classes:
        return []
    return [f"c{c}, CRF {crf:.2f}" if c >= 0 else "" for c, crf in zip(step.classes[gi], step.crf[gi], strict=True)]


def marks(step: Step, gi: int) -> dict[int, str]:
    """This step's slots of group `gi`: "fill" where a miss was uploaded, "hit" where a cached expert was used."""
    if step.group != gi:
        return {}
    slots = step.slots[gi]
    hit = {int(i): "hit" for i, kk in enumerate(slots) if kk % N_EXPERT in step.hits and kk // N_EXPERT == step.layer}
    return {s: "fill" for _, s in step.fills} | hit


CHIP = {"hit": ":blue-background[{}]", "fill": ":orange-background[{}]"}  # the heatmap's hit and upload colours


def pool_line(step: Step, gi: int, n_slots: int) -> str:
    """One group's pool after this step on one line, next eviction first, this step's hits and uploads marked: the
    pools' change in view beside the Step button (the heatmaps are further down)."""
    slots, mark = step.slots[gi], marks(step, gi)
    order = step.order[gi] if step.order else range(len(slots))
    cells = [
        CHIP.get(mark.get(s), "{}").format(f"L{slots[s] // N_EXPERT}E{slots[s] % N_EXPERT}")
        for s in order
        if slots[s] >= 0
    ]
    empty = n_slots - len(cells)
    return f"group {gi + 1}: " + (" ".join(cells) or "empty") + (f" (+{empty} empty)" if empty > 0 and cells else "")


def draw_pools(step: Step, plan, model, work, budget: int, policy: str, index: int) -> None:
    """Every group's pool after this step under `policy`, its eviction order, and the simulator's check."""
    for gi, (group, slots) in enumerate(zip(plan.groups, step.slots, strict=True)):
        if not group.cached:
            st.warning(f"group {gi + 1} ({group.type_name}) got too few slots and is not cached")
            continue
        mark = marks(step, gi)
        order = step.order[gi] if step.order else ()
        fig = pool_heatmap(slots, N_EXPERT, mark, order, slot_notes(step, gi))
        fig.update_layout(
            title=f"group {gi + 1}: {group.n_layers} layers, {group.type_name}, {group.n_slots} slots (+1 guard slot)"
        )
        st.plotly_chart(fig, width="stretch", key=f"pool_{policy}_{gi}")
        held = [f"L{slots[s] // N_EXPERT}E{slots[s] % N_EXPERT}" for s in order if slots[s] >= 0]
        what = "LRU order" if policy != CLASS_LRU else "eviction order (largest age / 2^class first)"
        if held:
            st.caption(
                f"{what} of group {gi + 1}, next eviction first: **{held[0]}** → " + " → ".join(held[1:])
                if len(held) > 1
                else f"{what} of group {gi + 1}: **{held[0]}** (next eviction)"
            )
    check = run_policy(policy, model, work.prefix(index + 1), [budget])[0]
    check_hits, check_misses = int(check.hits.sum()), int(check.uploads.sum())
    agree = check_hits == step.total_hits
    st.metric(
        "hits / misses so far",
        f"{step.total_hits} / {step.total_misses}",
        help="counted like llama.cpp's statistics: distinct experts per (layer, ubatch)",
    )
    st.caption(
        ("The simulator agrees with these counts." if agree else "MISMATCH with the simulator!")
        + f" Simulator: {check_hits} hits, {check_misses} misses."
    )
    if policy == CLASS_LRU:  # the victims' scores, and the open readings that would evict another expert here
        lines = class_lru_step(work, plan, N_EXPERT, index).lines()
        st.markdown("\n".join(f"- {line}" for line in lines) if lines else "- no eviction at this step")


st.header("How the MoE cache works")
with friendly_errors():
    sidebar_session("This page plays a 12-expert toy model; the model and GPU above are kept for the other pages.")
left, right = st.columns([2, 3])
with left:
    st.markdown("""
A Mixture-of-Experts layer sends each token to a few of its experts (here 2 of 12). With
[`--cpu-moe`](https://github.com/ggml-org/llama.cpp/tree/master/tools/server) the experts stay in host RAM and
[`--moe-cache-mib N`](https://github.com/ggml-org/llama.cpp/tree/master/tools/server) keeps the ones the router
picks in a pool of GPU **slots**; one slot holds one expert's gate, up and down slices.

- **Hit**: the expert is in a slot, the GPU reads it there (blue).
- **Miss**: it is uploaded over PCIe into the least recently used slot (orange), evicting whatever was there —
  possibly an expert of *another layer*, since every layer of a group shares one pool and one LRU.
- **Groups**: layers whose expert tensors share type and shape share a pool. Toggle *mixed quant*: the odd layers
  get a different `ffn_down` type and their own pool, as Q4_K_M files get a Q6_K and a Q4_K group.
- **Guard slot**: each pool allocates one slot more than it uses, because CUDA's MMQ kernels may read past the end.
- **Why a budget refuses to start**: a group needs at least as many slots as experts per token; below that it is
  dropped, and with no group left llama-server stops (*MoE cache is too small to hold the experts of one token*).
  That is why 49 MiB refuses and 50 MiB starts for Qwen3-30B-A3B.
- **Concurrent users and speculative decoding** put several tokens in one ubatch: more distinct experts per layer,
  more churn, fewer hits. Over 32 tokens (prompts) the pool is bypassed: cached experts are only *copied*.
- **ClassLRU** (b12170 and later, mainline today): each expert keeps a *CRF*, its uses decayed with a half-life of
  128 tokens, kept even after it is evicted; its class is floor(log2 CRF), 0 to 7. Each class has its own LRU list,
  and a miss evicts, among the least recently used slot of each list, the one with the largest age / 2^class: an
  expert used often survives a burst of experts used once. Toggle *LRU and ClassLRU side by side* to step both.
  (A model: read from the source's opening comment, not its code.) Under its pools each step names the victim's
  class, age and score, and which open readings of the comment would have evicted another expert.
- **CPU share** (`--moe-cache-cpu-share`, b12191): once the pool is full, a share of the misses is computed on the
  CPU instead of uploaded, and not inserted.
""")

with friendly_errors(), right:
    stepper = st.container()  # filled once the settings below are read: the step and its pools in the first view
    st.markdown("**The toy's settings**")
    c1, c2, c5 = st.columns(3)
    budget = c1.slider("--moe-cache-mib", 10, MAX_TOY_BUDGET, 48, key="learn_budget")
    concurrency = c2.slider("users", 1, 4, 1, key="learn_users")
    draft = c5.slider(
        "draft tokens",
        0,
        4,
        0,
        key="learn_draft",
        help="speculative decoding: each step verifies draft + 1 tokens of every user in one ubatch",
    )
    c3, c4 = st.columns(2)  # toggles in a row of their own: five columns cut their labels off
    mixed = c3.toggle("mixed quant", True, key="learn_mixed")
    prompt = c4.toggle("prompt of 40 tokens", False, key="learn_prompt")
    policy = st.radio(
        "policy",
        STEPPABLE,
        horizontal=True,
        key="learn_policy",
        help=f"lazy-unload (modelled): an expert idle for {idle_limit(**POLICIES['lazy-unload'].knobs)} ubatches "
        "is unloaded from its slot",
    )
    both = st.toggle(
        "LRU and ClassLRU side by side (the same workload, b11549 and b12170+)",
        False,
        key="learn_both",
        help=f"ClassLRU: CRF half-life {HALF_LIFE_TOKENS:g} tokens, {N_CLASSES} classes; each cell shows its slot's "
        "class (c) and CRF at its last use",
    )
    shown = [REFERENCE, CLASS_LRU] if both else [policy]
    model = toy_model(mixed)
    plan = plan_cache(model, budget)
    if not plan.starts:
        stepper.error(f"llama-server would refuse to start: {plan.error}. " + " ".join(plan.warnings))
        st.stop()
    st.caption(" | ".join(plan.log_lines()))
    work = toy_workload(concurrency, draft, 40 if prompt else 0)
    trails = {name: steps(work, plan, N_EXPERT, policy=name) for name in shown}
    trail = trails[shown[0]]
    key = (budget, concurrency, draft, mixed, prompt, policy, both)
    state = st.session_state
    if state.get("learn_key") != key:  # new settings: start again
        state.learn_key, state.learn_slider = key, 1
    if state.pop("learn_advance", False):  # Play asked for the next step on the last run
        state.learn_slider = state.get("learn_slider", 1) + 1
    with stepper:
        b1, b2, b3 = st.columns(3)
        if b1.button("Reset", key="learn_reset"):
            state.learn_slider = 1
        if b2.button("Step", key="learn_next"):
            state.learn_slider = state.get("learn_slider", 1) + 1
        playing = b3.toggle("Play", False, key="learn_play")
        state.learn_slider = min(max(state.get("learn_slider", 1), 1), len(trail))
        number = st.slider("step", 1, len(trail), key="learn_slider", help="the step shown, 1 to the last")
        index = number - 1
        step = trail[index]
        st.markdown(
            f"**Step {number}/{len(trail)}**: ubatch {step.ubatch}, layer {step.layer}, {step.n_tokens} token(s): "
            f"**{step.path}**. Hits {list(step.hits)}, uploaded {[e for e, _ in step.fills]}, "
            f"evicted {[f'L{layer}E{e}' for layer, e in step.evicted]}."
        )
        for name in shown:
            lines = [
                pool_line(trails[name][index], gi, group.n_slots)
                for gi, group in enumerate(plan.groups)
                if group.cached
            ]
            st.markdown(
                f"**Pools{f' ({name})' if both else ''}** after this step, next eviction first "
                "(:blue-background[hit], :orange-background[uploaded]):  \n" + "  \n".join(lines)
            )
    group_slots = plan.groups[step.group].n_slots if step.group is not None else min(g.n_slots for g in plan.groups)
    st.info(why(step, model.n_expert_used, group_slots))
    n_cpu = sum(s.path == "CPU" for s in trail)
    if n_cpu > len(trail) / 2:
        found = pool_budget(concurrency, draft, mixed, prompt, policy, budget + 1)
        st.warning(
            f"{n_cpu} of {len(trail)} steps run on the CPU: {concurrency * (draft + 1)} tokens per ubatch need more "
            "distinct experts than the pool has slots."
            + (f" At {found} MiB the pool serves them." if found else " No toy budget is large enough.")
        )
        if found:
            st.button(f"use {found} MiB", key="learn_pool_budget", on_click=set_budget, args=(found,))
    for column, name in zip(st.columns(len(shown)), shown, strict=True):
        with column:
            if both:
                st.markdown(f"**{name}** ({POLICIES[name].label})")
            draw_pools(trails[name][index], plan, model, work, budget, name, index)
    if playing and index < len(trail) - 1:
        time.sleep(0.6)
        state.learn_advance = True
        st.rerun()
