"""The app's request: the one place pages and ui/ build the Scenario every answer of a page reads (issue 37).

The sidebar and the page's own controls give its fields; each answer then reads that one frozen Scenario (the cached
calls take it whole), so no value the user set can fall off a parameter list between a page and the library.
"""

from __future__ import annotations

from moe_model.llama.builds import has_cpu_share
from moe_model.llama.slot_plan import Placement
from moe_model.policies.knobs import SHARE
from moe_model.speed.scenario import Scenario
from ui.sidebar import sidebar_reading
from ui.state import SCENARIO, kept_setting

DRAFTING = ("draft_tokens", "accept_rate")  # Explore's controls of the request that other pages read as kept


def app_scenario(
    serving: dict,
    build: int,
    placement: Placement | None = None,
    load_mode: str = "mmap",
    cpu_share: float = 0.0,
    **drafting,
) -> Scenario:
    """The page's Scenario: the sidebar's serving fields (sidebar_serving), build, placement and load mode, the
    CPU share, drafting (`draft_tokens`, `accept_rate`: the page's controls) and the ClassLRU reading the calibrated
    machine's logs picked (sidebar_reading); the budget is 0, each answer sets its own."""
    knobs = ((SHARE.name, cpu_share),) if cpu_share else ()
    return Scenario(
        placement=placement or Placement(),
        load_mode=load_mode,
        build=build,
        knobs=knobs,
        policy_reading=sidebar_reading(),
        **serving,
        **drafting,
    )


def kept_page_controls(build: int) -> dict:
    """Explore's own controls of the request as last set (kept across pages and in the URL): the CPU share (none
    before the build that has it) and drafting, for a page that shows none of them but answers the same request
    (Shopping): app_scenario's keyword arguments."""
    share = kept_setting(SCENARIO["cpu_share"]) if has_cpu_share(build) else 0.0
    return {"cpu_share": share} | {name: kept_setting(SCENARIO[name]) for name in DRAFTING}
