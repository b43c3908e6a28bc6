"""Learn: watch the cache work on a toy model, one (layer, ubatch) at a time."""

import time

import streamlit as st

from moe_model.charts import pool_heatmap
from moe_model.policies import POLICIES, run_policy
from moe_model.policies.lazy_unload import idle_limit
from moe_model.slot_plan import plan_cache
from moe_model.stepper import STEPPABLE, steps
from moe_model.toy import N_EXPERT, toy_model, toy_workload
from ui.common import friendly_errors

st.header("How the MoE cache works")
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
- **CPU share** (`--moe-cache-cpu-share`, b12191): once the pool is full, a share of the misses is computed on the
  CPU instead of uploaded, and not inserted.
""")

with friendly_errors(), right:
    c1, c2, c5, c3, c4 = st.columns(5)
    budget = c1.slider("--moe-cache-mib", 10, 160, 48, key="learn_budget")
    concurrency = c2.slider("users", 1, 4, 1, key="learn_users")
    draft = c5.slider(
        "draft tokens",
        0,
        4,
        0,
        key="learn_draft",
        help="speculative decoding: each step verifies draft + 1 tokens of every user in one ubatch",
    )
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
    model = toy_model(mixed)
    plan = plan_cache(model, budget)
    if not plan.starts:
        st.error(f"llama-server would refuse to start: {plan.error}. " + " ".join(plan.warnings))
        st.stop()
    st.caption(" | ".join(plan.log_lines()))
    work = toy_workload(concurrency, draft, 40 if prompt else 0)
    trail = steps(work, plan, N_EXPERT, policy=policy)
    key = (budget, concurrency, draft, mixed, prompt, policy)
    state = st.session_state
    if state.get("learn_key") != key:  # new settings: start again
        state.learn_key, state.learn_slider = key, 0
    if state.pop("learn_advance", False):  # Play asked for the next step on the last run
        state.learn_slider = state.get("learn_slider", 0) + 1
    b1, b2, b3 = st.columns(3)
    if b1.button("Reset", key="learn_reset"):
        state.learn_slider = 0
    if b2.button("Step", key="learn_next"):
        state.learn_slider = state.get("learn_slider", 0) + 1
    playing = b3.toggle("Play", False, key="learn_play")
    state.learn_slider = min(state.get("learn_slider", 0), len(trail) - 1)
    index = st.slider("step", 0, len(trail) - 1, key="learn_slider")
    step = trail[index]
    st.markdown(
        f"**Step {index + 1}/{len(trail)}**: ubatch {step.ubatch}, layer {step.layer}, {step.n_tokens} token(s): "
        f"**{step.path}**. Hits {list(step.hits)}, uploaded {[e for e, _ in step.fills]}, "
        f"evicted {[f'L{layer}E{e}' for layer, e in step.evicted]}."
    )
    for gi, (group, slots) in enumerate(zip(plan.groups, step.slots, strict=True)):
        if not group.cached:
            st.warning(f"group {gi + 1} ({group.type_name}) got too few slots and is not cached")
            continue
        mark = {}
        if step.group == gi:
            mark |= {s: "fill" for _, s in step.fills}
            mark |= {
                int(i): "hit"
                for i, kk in enumerate(slots)
                if kk % N_EXPERT in step.hits and kk // N_EXPERT == step.layer
            }
        fig = pool_heatmap(slots, N_EXPERT, mark)
        fig.update_layout(
            title=f"group {gi + 1}: {group.n_layers} layers, {group.type_name}, {group.n_slots} slots (+1 guard slot)"
        )
        st.plotly_chart(fig, width="stretch", key=f"pool_{gi}")
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
    if playing and index < len(trail) - 1:
        time.sleep(0.6)
        state.learn_advance = True
        st.rerun()
