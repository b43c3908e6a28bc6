"""How each number a page or command shows is known, in one vocabulary everywhere (issue 36):

    measured     read from the user's own run: their logs' hit rate (--hit-rate), their CPU run's speeds
    replayed     the user's routing (a recorded trace) through a policy that transcribes llama.cpp's code: exact
    calibrated   a model whose inputs were fitted to the user's machine: their CPU run (a host record), their logs
    modelled     a model with nothing of the user's in it: its error is the one measured on machines left out

A number's basis depends on where its inputs came from, never on its value: the routing (a trace, a hit rate given,
a routing fitted to logs, or the synthetic preset), the policy (exact or modelled: policies.wording), and the machine
(a host record applied, a machine calibrated from logs, or a preset).
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from moe_model.speed.hardware import Hardware
from moe_model.speed.scenario import Scenario

MEASURED, REPLAYED, CALIBRATED, MODELLED = "measured", "replayed", "calibrated", "modelled"
TRACE, GIVEN, LOGS, SYNTHETIC = "trace", "given", "logs", "synthetic"  # where the hit rate's routing came from
ROUTINGS = (TRACE, GIVEN, LOGS, SYNTHETIC)


def text_tag(word: str) -> str:
    """A basis word as plain text shows it beside a figure, e.g. '[modelled]' (a page draws its badge instead)."""
    return f"[{word}]"


@dataclass(frozen=True)
class Basis:
    """Each shown number's basis (one of the four words) and why, in a few words."""

    hit_rate: str
    decode: str
    prompt: str
    why: tuple[tuple[str, str], ...]  # (field, words) for hit_rate, decode_tps, prefill_tps

    def as_dict(self) -> dict:
        """The JSON's `basis`: a word per field, and `why` per field."""
        return {"hit_rate": self.hit_rate, "decode_tps": self.decode, "prefill_tps": self.prompt, "why": dict(self.why)}

    def said(self, name: str, tag: Callable[[str], str] = str) -> str:
        """`calibrated (your CPU run ...)`: the word (as `tag` draws it: a page's badge) and why, for a field of
        as_dict."""
        word = {"hit_rate": self.hit_rate, "decode_tps": self.decode, "prefill_tps": self.prompt}[name]
        return f"{tag(word)} ({dict(self.why)[name]})"

    def tag(self, name: str) -> str:
        """The badge a figure carries in text, e.g. '[calibrated]', for a field of as_dict."""
        return text_tag(self.as_dict()[name])

    def tagged_line(self, tag: Callable[[str], str] = str) -> str:
        """One line for a page or a command: every number's basis, each word as `tag` draws it (a page's badge)."""
        return (
            f"How each number is known: hit rate {self.said('hit_rate', tag)}; decode {self.said('decode_tps', tag)}; "
            f"prompt {self.said('prefill_tps', tag)}."
        )

    @property
    def line(self) -> str:
        """One line for a command: every number's basis in plain words."""
        return self.tagged_line()


def hit_rate_basis(routing: str, sc: Scenario) -> tuple[str, str]:
    """The hit rate's basis for a routing (ROUTINGS) replayed by `sc`'s policy."""
    if routing not in ROUTINGS:
        raise ValueError(f"routing {routing!r} is not one of {', '.join(ROUTINGS)}")
    wording = sc.hit_rate_wording
    if routing == GIVEN:
        return MEASURED, "the hit rate you gave, e.g. your logs' teardown line"
    if routing == TRACE:
        if wording.how == "exact":
            return REPLAYED, f"your routing replayed by {wording.policy}, exact"
        return MODELLED, f"your routing replayed by {wording.policy}, a modelled policy"
    if routing == LOGS:
        return CALIBRATED, f"routing fitted to your logs, replayed by {wording.tag}"
    return MODELLED, f"the synthetic routing preset, replayed by {wording.tag}"


def speed_basis(hw: Hardware, machine_calibrated: bool, rel_error: float, prefill_rel_error: float = 0.0):
    """The decode and prompt speeds' bases: calibrated where a host record or the machine's logs set its terms."""
    record = getattr(hw, "host_record", None)  # the host record apply_host_record applied (fits.host_fit)
    if record:
        decode = CALIBRATED, f"the time model with your CPU run's rate, ±{100 * rel_error:.0f} % left out"
    elif machine_calibrated:
        decode = CALIBRATED, f"the time model fitted to your machine's logs, ±{100 * rel_error:.0f} % left out"
    else:
        decode = MODELLED, f"the time model, ±{100 * rel_error:.0f} % on machines left out of its fit"
    prompt = f"the time model, ±{100 * prefill_rel_error:.0f} % on machines left out" if prefill_rel_error else ""
    prompt = prompt or "the time model (no left-out error measured for it here)"
    if record:  # with a GPU, prompt ubatches of 32+ tokens run there: the CPU run's prompt speed is not a term
        prompt += "; your CPU run's prompt speed is not an input (a GPU runs prompts)"
    prompt = MODELLED, prompt
    return decode, prompt


def prediction_basis(
    routing: str,
    sc: Scenario,
    hw: Hardware,
    *,
    machine_calibrated: bool = False,
    rel_error: float = 0.0,
    prefill_rel_error: float = 0.0,
) -> Basis:
    """Every number of a prediction on `hw` of scenario `sc` whose hit rates came from `routing` (ROUTINGS)."""
    hit = hit_rate_basis(routing, sc)
    decode, prompt = speed_basis(hw, machine_calibrated, rel_error, prefill_rel_error)
    why = (("hit_rate", hit[1]), ("decode_tps", decode[1]), ("prefill_tps", prompt[1]))
    return Basis(hit[0], decode[0], prompt[0], why)


def host_run_basis(record) -> dict:
    """The user's CPU run's own speeds (a HostRecord), each measured: the JSON's `host_run`."""
    return {
        "decode_tps": record.decode_tps,
        "prompt_tps": record.prompt_tps,
        "threads": record.threads,
        "source": record.source,
        "basis": MEASURED,
        "why": f"your CPU run ({record.runtime}): {record.model_name} on {record.cpu_model}",
    }
