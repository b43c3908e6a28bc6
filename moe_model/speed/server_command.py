"""The llama-server command of a Scenario, and a llama-server command read back into one.

Each Scenario and Placement setting that llama-server takes declares its flag (or environment variable) and
llama.cpp's own default (moe_model.settings; b11549 common/arg.cpp, common/common.h, docs/llamacpp-cache.md
section 1). The command carries every setting whose value differs from that default; `read_command` takes the same
declarations back, so a printed command, read, is the Scenario it was printed from: same layout, same price.
What a command does not say (the request: prompt, depth, tokens generated, draft acceptance; the build) comes
from the request given beside it.
"""

from __future__ import annotations

import shlex
from dataclasses import dataclass, replace

from moe_model.errors import MoeModelError
from moe_model.limits import DEFAULT_RECORD_BATCH, MAX_COMMAND_CHARS, MAX_GPUS, shown
from moe_model.llama.slot_plan import Placement
from moe_model.policies.knobs import FLAG_KNOBS, flag_value
from moe_model.settings import Setting, settings_of
from moe_model.speed.scenario import Scenario

PROGRAM = "llama-server"
VERBOSITY = ("-lv", "4")  # the log then shows the slots and hit rates this tool predicts
DRAFT_MODEL = ("-md", "DRAFT.gguf")  # the user's draft model: nothing is drafted without one (a placeholder)
DRAFT_N_MAX = 3  # --spec-draft-n-max when a draft model is given without it (b11549 common.h, draft.n_max)
SERVER = {name: s for name, s in settings_of(Scenario).items() if s.on_server}
PLACEMENT = settings_of(Placement)
MODEL_FLAGS = ("-m", "--model", "-mu", "--model-url")
DRAFT_MODEL_FLAGS = ("-md", "--spec-draft-model", "--model-draft")
BATCH_FLAGS = ("-b", "--batch-size")  # -ub above -b is cut to -b (b11549 src/llama-context.cpp, llama_context)
# the placement's own spellings (b11549 arg.cpp; --fit takes on | off), as Placement.flags() prints the first
PLACEMENT_WORDS = {"--fit": "fit", "-fit": "fit", "--cpu-moe": "cpu_moe", "-cmoe": "cpu_moe"}
PLACEMENT_WORDS |= {"--n-cpu-moe": "n_cpu_moe", "-ncmoe": "n_cpu_moe"}
# flags that change nothing this tool prices, read past with their value (True) or alone (False)
IGNORED = {"-lv": True, "--verbosity": True, "--log-verbosity": True, "--host": True, "--port": True}
IGNORED |= {"-t": True, "--threads": True, "-tb": True, "--threads-batch": True, "-a": True, "--alias": True}
IGNORED |= {flag: True for flag in DRAFT_MODEL_FLAGS} | {"--jinja": False}


@dataclass(frozen=True)
class ServerCommand:
    """A llama-server command read: the model it names and the Scenario it starts (placement included)."""

    model_path: str
    scenario: Scenario


def _text(value) -> str:
    if isinstance(value, float):
        return f"{value:g}"
    if isinstance(value, tuple):
        return ",".join(f"{x:g}" for x in value)
    return str(value)


def _flag(s: Setting, value) -> list[str]:
    """A setting's flag and value where the value is not llama.cpp's default (a true switch: the flag alone)."""
    if value == s.llama_default:
        return []
    return [s.llama_flags[0]] if isinstance(value, bool) else [s.llama_flags[0], _text(value)]


def server_args(sc: Scenario, placement: Placement) -> list[str]:
    """llama-server's flags for a scenario on a placement (resolved or not): every setting off llama.cpp's default,
    the cache's CPU share beside its budget, a draft model beside the draft length, -b where -ub exceeds its
    default."""
    out = list(placement.flags())
    for s in SERVER.values():
        if not s.llama_flags:
            continue
        value = getattr(sc, s.name)
        out += _flag(s, value)
        if s.name == "budget_mib":
            out += [f for k in FLAG_KNOBS for f in _flag(k.setting, flag_value(sc.knobs, k))]
        elif s.name == "draft_tokens" and value:
            out += DRAFT_MODEL
        elif s.name == "n_ubatch" and value > DEFAULT_RECORD_BATCH:
            out += [BATCH_FLAGS[0], str(value)]
    return out


def server_env(sc: Scenario) -> list[str]:
    """The environment variables the command sets (NAME=VALUE before the program), off llama.cpp's default."""
    return [f"{s.llama_env}={_text(getattr(sc, s.name))}" for s in SERVER.values() if _env_differs(s, sc)]


def _env_differs(s: Setting, sc: Scenario) -> bool:
    return bool(s.llama_env) and getattr(sc, s.name) != s.llama_default


def command_line(model_path: str, sc: Scenario, placement: Placement) -> str:
    """The llama-server command for a scenario (-lv 4 so the user can verify slots and hit rates)."""
    model_flag = "-mu" if model_path.startswith(("http://", "https://")) else "-m"
    return " ".join([*server_env(sc), PROGRAM, model_flag, model_path, *server_args(sc, placement), *VERBOSITY])


def _spellings() -> dict[str, str]:
    """Every spelling a command may use, to the name it sets (a Scenario field, a placement part, a knob)."""
    out = {flag: name for name, s in SERVER.items() for flag in s.llama_flags}
    out |= {flag: name for name in ("n_gpu_layers", "tensor_split") for flag in PLACEMENT[name].llama_flags}
    out |= {k.llama_flag: f"knob:{k.name}" for k in FLAG_KNOBS}
    return out | PLACEMENT_WORDS | {f: "model" for f in MODEL_FLAGS} | {f: "batch" for f in BATCH_FLAGS}


KINDS = {int: "a whole number", float: "a number", tuple: "numbers separated by commas"}
SWITCHES = {"cpu_moe", *(name for name, s in SERVER.items() if isinstance(s.default, bool))}


def _tokens(text: str) -> list[str]:
    if len(text) > MAX_COMMAND_CHARS:
        raise MoeModelError(f"a command of {len(text):,} characters: this tool reads {MAX_COMMAND_CHARS:,} at most")
    try:
        return shlex.split(text.replace("\\\n", " "))
    except ValueError as err:
        raise MoeModelError(f"the command cannot be split into words: {err}") from None


def _given(words: list[str]) -> tuple[dict[str, str], list[str]]:
    """The flags given, by the name each sets (the last spelling wins, as in llama.cpp), and the draft model's."""
    spellings, given, drafts, i = _spellings(), {}, [], 0
    while i < len(words):
        word, value = words[i], None
        if word.startswith("--") and "=" in word:
            word, value = word.split("=", 1)
        if word in IGNORED:
            drafts += [word] if word in DRAFT_MODEL_FLAGS else []
            i += 1 + (IGNORED[word] and value is None)
            continue
        name = spellings.get(word)
        if name is None:
            raise MoeModelError(f"the command's {shown(word, 40)!r} is not a llama-server flag this tool reads")
        if name in SWITCHES:
            given[name] = "1"
            i += 1
            continue
        if value is None:
            if i + 1 >= len(words):
                raise MoeModelError(f"the command's {word} has no value")
            value, i = words[i + 1], i + 1
        given[name], i = value, i + 1
    return given, drafts


def _value(s: Setting, text: str, flag: str):
    """A flag's text as its field's value: by the setting's own parser, else by the default's type."""
    kind = type(s.default)
    try:
        if s.parse is not None:
            return s.parse(text)
        if kind is bool:
            return True
        if kind is tuple:
            return tuple(float(x) for x in text.split(","))
        return kind(text) if kind in (int, float) else text
    except ValueError:
        raise MoeModelError(f"{flag} takes {KINDS.get(kind, 'a value')}, got {shown(text, 40)!r}") from None


def _whole(text: str, flag: str) -> int:
    try:
        return int(text)
    except ValueError:
        raise MoeModelError(f"{flag} takes a whole number, got {shown(text, 40)!r}") from None


def _placement(given: dict[str, str]) -> Placement:
    """The placement the flags say, as Placement.flags() prints it: --fit on alone, else --cpu-moe or --n-cpu-moe K
    (no flag: every expert on the GPU), with -ngl and -ts."""
    fit = given.get("fit", "off") in ("on", "enabled", "true", "1")
    cpu_moe, n_cpu_moe = "cpu_moe" in given, _whole(given.get("n_cpu_moe", "0"), "--n-cpu-moe")
    if fit and (cpu_moe or n_cpu_moe):
        raise MoeModelError("this tool reads --fit on alone, or --cpu-moe / --n-cpu-moe K, not both together")
    ngl = _whole(given.get("n_gpu_layers", str(PLACEMENT["n_gpu_layers"].llama_default)), "-ngl")
    split = _value(PLACEMENT["tensor_split"], given["tensor_split"], "-ts") if "tensor_split" in given else ()
    if len(split) > MAX_GPUS:
        raise MoeModelError(f"-ts gives {len(split)} shares: this tool takes at most {MAX_GPUS} GPUs")
    return Placement(
        cpu_moe=cpu_moe, n_cpu_moe=n_cpu_moe, fit=fit, n_gpu_layers=ngl, n_gpus=max(1, len(split)), tensor_split=split
    )


def _server_values(given: dict[str, str], env: dict[str, str], drafts: list[str], request: Scenario) -> dict:
    """Each server setting: as given, else llama.cpp's default where it is one this tool models (-c's "the model's
    context" and -np's "auto" are not: the request's value stays)."""
    values = {}
    for name, s in SERVER.items():
        text = given.get(name) if s.llama_flags else env.get(s.llama_env)
        if text is not None:
            values[name] = _value(s, text, s.llama_flags[0] if s.llama_flags else s.llama_env)
        elif s.lo is None or s.llama_default >= s.lo:
            values[name] = s.llama_default
        else:
            values[name] = getattr(request, name)
    if "draft_tokens" not in given and drafts:
        values["draft_tokens"] = DRAFT_N_MAX
    batch = _whole(given.get("batch", str(DEFAULT_RECORD_BATCH)), "-b")
    values["n_ubatch"] = min(values["n_ubatch"], batch)
    return values


def read_command(text: str, request: Scenario | None = None) -> ServerCommand:
    """A llama-server command line read into the Scenario it starts: its placement, cache, context, batch, KV and
    attention flags; what it leaves out at llama.cpp's default; the request's fields (prompt, depth, tokens
    generated, draft acceptance, build, policy) from `request`. A flag this tool does not read is refused."""
    request = request or Scenario()
    words = _tokens(text)
    env = {}
    while words and "=" in words[0] and words[0].split("=", 1)[0].isidentifier():
        name, value = words.pop(0).split("=", 1)
        env[name] = value
    if not words or not words[0].rsplit("/", 1)[-1].startswith(PROGRAM):
        raise MoeModelError(f"a llama-server command starts with {PROGRAM}, got {shown(text, 40)!r}")
    given, drafts = _given(words[1:])
    if "model" not in given:
        raise MoeModelError("the command names no model (-m FILE or -mu URL)")
    knobs = {k.name: _value(k.setting, given.get(f"knob:{k.name}", "0"), k.llama_flag) for k in FLAG_KNOBS}
    values = _server_values(given, env, drafts, request) | {"placement": _placement(given)}
    return ServerCommand(given["model"], replace(request, **values).with_knobs(knobs))
