"""The server-like recording loop: llama-server's start-up warm-up and seq_rm probe, then each prompt served alone
(-np 1, cache_prompt off: the KV memory cleared first), its tokens in the server's llama_decode calls, then greedy
generation of n_predict tokens, each but the last decoded (the server stops on the n-th sampled token, or on an
end-of-generation token, without decoding it). Every ubatch's routing is kept in llama.cpp's order, its last layer
as the targeted build computes it (llama-cpp-python's older llama.cpp computes every prompt token there for some
architectures; a b11480+ server only the output rows)."""

from __future__ import annotations

import math
import signal
import threading
import time
from collections.abc import Callable, Iterator, Sequence
from contextlib import contextmanager
from dataclasses import dataclass, field, replace
from pathlib import Path

from moe_model.limits import RECORD_PROGRESS_S, RECORD_TIMED_TOKENS
from moe_model.llama.builds import MAINLINE_BUILD
from moe_model.llama.output_rows import last_layer_prunes
from moe_model.llama.server_warm_up import PROBE_TOKEN, PROBE_TOKENS, start_up_probe
from moe_model.record.callback import LayerRecord, RoutingReader
from moe_model.record.llama import ContextSettings, LlamaCpu
from moe_model.record.prompts import Prompt
from moe_model.record.runtime import RecordError, Runtime, load_runtime
from moe_model.record.server_batches import prompt_calls
from moe_model.record.trace_out import PHASE_DECODE, PHASE_PROMPT, PHASE_WARMUP, WARM_UP_CALL, Ubatch


@dataclass(frozen=True)
class RecordSettings:
    """A recording: the server's context and batching, the tokens generated per prompt, CPU threads, the llama.cpp
    build whose server the trace follows (its start-up probe, its last layer's rows); with_probs (tests) also reads
    the router's probabilities."""

    n_predict: int
    n_ctx: int
    n_batch: int
    n_ubatch: int
    threads: int
    with_probs: bool = False
    build: int = MAINLINE_BUILD


@dataclass(frozen=True)
class Timings:
    """What the CPU took: prompt calls, and generation calls after each prompt's first (their depths summed)."""

    prompt_tokens: int = 0
    prompt_s: float = 0.0
    decode_tokens: int = 0
    decode_s: float = 0.0
    decode_depth_sum: int = 0


@dataclass(frozen=True)
class Recording:
    """What a recording kept: its ubatches, timings, each prompt's generated tokens, whether Ctrl-C cut it."""

    ubatches: tuple[Ubatch, ...]
    timings: Timings
    generated: tuple[tuple[int, ...], ...]
    interrupted: bool
    n_ubatch: int


class Progress:
    """Tokens done of the total, the rate and the time left, written at most every RECORD_PROGRESS_S seconds."""

    def __init__(self, total: int, write: Callable[[str], None] | None) -> None:
        self.total, self.write, self.done = total, write, 0
        self.start = self.last = time.perf_counter()

    def add(self, tokens: int) -> None:
        self.done += tokens
        now = time.perf_counter()
        if self.write is not None and (now - self.last >= RECORD_PROGRESS_S or self.done >= self.total):
            self.last = now
            rate = self.done / max(now - self.start, 1e-9)
            left = (self.total - self.done) / rate if rate else math.inf
            self.write(f"record: {self.done:,}/{self.total:,} tokens, {rate:,.1f} tokens/s, about {left:,.0f} s left")


class CtrlC:
    """Ctrl-C while recording asks it to stop after the llama_decode call under way: a KeyboardInterrupt raised
    inside llama.cpp's eval callback would be swallowed by ctypes ("Exception ignored on calling ctypes callback")
    and cut a ubatch short, so SIGINT only sets a flag, and `check()` raises KeyboardInterrupt between calls."""

    def __init__(self) -> None:
        self.requested = False

    def _handler(self, _signum: int, _frame: object) -> None:
        self.requested = True

    def check(self) -> None:
        if self.requested:
            raise KeyboardInterrupt

    @contextmanager
    def installed(self) -> Iterator[CtrlC]:
        """The handler for the block, where Python's own is in place (the main thread; SIGINT not ignored)."""
        own = threading.current_thread() is threading.main_thread()
        if not own or signal.getsignal(signal.SIGINT) is not signal.default_int_handler:
            yield self
            return
        previous = signal.signal(signal.SIGINT, self._handler)
        try:
            yield self
        finally:
            signal.signal(signal.SIGINT, previous)


@dataclass
class _Run:
    """The recording under way: the ubatches kept so far and the MoE layers one ubatch passes (from the warm-up)."""

    llm: LlamaCpu
    reader: RoutingReader
    settings: RecordSettings
    progress: Progress
    on_ubatch: Callable[[int], None] | None
    ctrl_c: CtrlC
    ubatches: list[Ubatch] = field(default_factory=list)
    moe_layers: tuple[int, ...] = ()
    generated: list[tuple[int, ...]] = field(default_factory=list)
    calls: int = 0
    prunes: bool = True  # the targeted build's last layer computes only the output rows

    def call(self, tokens: list[int], pos0: int, phase: int, logits: bool) -> None:
        """One llama_decode; its complete ubatches kept (also when Ctrl-C stops it midway)."""
        try:
            self.llm.decode(tokens, pos0, logits)
        finally:
            expected = 1 if phase == PHASE_WARMUP else math.ceil(len(tokens) / self.llm.n_ubatch)
            self._keep(self.reader.drain(), phase, expected, logits)
        self.reader.raise_pending()
        self.progress.add(len(tokens))
        self.calls += phase != PHASE_WARMUP
        self.ctrl_c.check()

    def _keep(self, records: list[LayerRecord], phase: int, expected: int, logits: bool) -> None:
        if not self.moe_layers:  # the first warm-up shows them
            self.moe_layers = tuple(r.layer for r in records)
        width = len(self.moe_layers)
        if not width:
            raise RecordError("llama.cpp computed no ffn_moe_topk tensor: this model has no MoE layer record reads")
        complete = len(records) // width
        if self.reader.error is None and (complete != expected or len(records) % width):
            raise RecordError(f"llama.cpp computed {len(records)} MoE layer records; expected {expected} ubatches")
        call = WARM_UP_CALL if phase == PHASE_WARMUP else self.calls
        for j in range(complete):
            layers = tuple(records[j * width : (j + 1) * width])
            if tuple(r.layer for r in layers) != self.moe_layers:
                raise RecordError("llama.cpp computed the MoE layers of a ubatch out of order")
            outputs = int(logits and j == expected - 1)  # only the call's last token asks for logits
            self.ubatches.append(Ubatch(phase, call, self._pruned(layers, outputs)))
            if self.on_ubatch is not None:
                self.on_ubatch(len(self.ubatches))

    def _pruned(self, layers: tuple[LayerRecord, ...], outputs: int) -> tuple[LayerRecord, ...]:
        """The last layer cut to the ubatch's output rows (its last `outputs` tokens) where the targeted build
        prunes it and llama-cpp-python's llama.cpp did not."""
        last = layers[-1]
        if not self.prunes or last.layer != self.llm.n_layer - 1 or last.n_tokens <= outputs:
            return layers
        first = last.n_tokens - outputs
        probs = None if last.probs is None else last.probs[first:]
        return (*layers[:-1], replace(last, ids=last.ids[first:], probs=probs))

    def warm_up(self, probe: bool) -> None:
        """llama-server's start-up decode of BOS and EOS (common_init_from_params), then its memory cleared; then,
        where the build makes it, the seq_rm probe (common_context_can_seq_rm): {0, 0}, the memory cleared."""
        self.call(self.llm.special_tokens()[: self.llm.n_batch], 0, PHASE_WARMUP, True)
        self.llm.clear()
        if probe:
            self.call([PROBE_TOKEN] * PROBE_TOKENS, 0, PHASE_WARMUP, True)
            self.llm.clear()

    def serve(self, tokens: list[int]) -> None:
        """One request: the prompt in the server's calls (logits for its last token only), then greedy generation."""
        self.llm.clear()
        generated: list[int] = []
        self.generated.append(())
        for start, end in _prompt_calls(self.llm, len(tokens)):
            self.call(tokens[start:end], start, PHASE_PROMPT, end == len(tokens))
        pos = len(tokens)
        while True:
            generated.append(self.llm.greedy())
            self.generated[-1] = tuple(generated)
            if len(generated) >= self.settings.n_predict or self.llm.is_end(generated[-1]):
                return
            self.call([generated[-1]], pos, PHASE_DECODE, True)
            pos += 1


def record(
    model_path: str | Path,
    prompts: Sequence[Prompt],
    settings: RecordSettings,
    progress: Callable[[str], None] | None = None,
    on_ubatch: Callable[[int], None] | None = None,
    runtime: Runtime | None = None,
) -> Recording:
    """Serve `prompts` on the CPU as llama-server would and keep the routing of every ubatch. Ctrl-C (after the
    llama_decode call under way), or a KeyboardInterrupt raised by on_ubatch, ends it early, keeping the complete
    ubatches; Ctrl-C while the model loads raises KeyboardInterrupt once it is loaded."""
    runtime = runtime or load_runtime()
    with CtrlC().installed() as ctrl_c:
        return _recorded(runtime, model_path, prompts, settings, progress, on_ubatch, ctrl_c)


def _recorded(
    runtime: Runtime,
    model_path: str | Path,
    prompts: Sequence[Prompt],
    settings: RecordSettings,
    progress: Callable[[str], None] | None,
    on_ubatch: Callable[[int], None] | None,
    ctrl_c: CtrlC,
) -> Recording:
    reader = RoutingReader(runtime, settings.with_probs)
    context = ContextSettings(settings.n_ctx, settings.n_batch, settings.n_ubatch, settings.threads)
    with LlamaCpu(runtime, model_path, context, reader) as llm:
        token_lists = [llm.tokenize(p) for p in prompts]
        _check_lengths(token_lists, settings.n_predict, llm.n_ctx)
        ctrl_c.check()  # pressed while the model loaded: nothing recorded
        probe = start_up_probe(settings.build)
        total = (
            len(llm.special_tokens()) + probe * PROBE_TOKENS + sum(len(t) + settings.n_predict - 1 for t in token_lists)
        )
        prunes = last_layer_prunes(llm.architecture, settings.build)
        run = _Run(llm, reader, settings, Progress(total, progress), on_ubatch, ctrl_c, prunes=prunes)
        timings, interrupted = Timings(), False
        try:
            run.warm_up(probe)
            for tokens in token_lists:
                run.serve(tokens)
            timings = time_cpu(llm, token_lists, run.generated, progress, ctrl_c)
        except KeyboardInterrupt:
            interrupted = True
    return Recording(tuple(run.ubatches), timings, tuple(run.generated), interrupted, llm.n_ubatch)


def time_cpu(
    llm: LlamaCpu,
    token_lists: list[list[int]],
    generated: list[tuple[int, ...]],
    progress: Callable | None,
    ctrl_c: CtrlC,
) -> Timings:
    """The CPU's speed, timed after the recording (the model's pages read by then) in a context without the eval
    callback: the prompts served again, each generated token but the last decoded as the recording did, until
    RECORD_TIMED_TOKENS generation tokens are timed. The first generation token after each prompt is not timed."""
    if progress is not None:
        progress("record: timing the CPU on the same requests, without reading the routing")
    llm.without_callback()
    prompt_tokens, prompt_s, decode_s, depths = 0, 0.0, 0.0, []
    for tokens, tokens_out in zip(token_lists, generated, strict=True):
        llm.clear()
        for start, end in _prompt_calls(llm, len(tokens)):
            prompt_s += _timed(llm, tokens[start:end], start, end == len(tokens))
            prompt_tokens += end - start
            ctrl_c.check()
        for i, token in enumerate(tokens_out[:-1]):
            seconds = _timed(llm, [token], len(tokens) + i, True)
            ctrl_c.check()
            if i:
                decode_s += seconds
                depths.append(len(tokens) + i)
        if len(depths) >= RECORD_TIMED_TOKENS:
            break
    return Timings(prompt_tokens, prompt_s, len(depths), decode_s, sum(depths))


def _prompt_calls(llm: LlamaCpu, n_tokens: int) -> list[tuple[int, int]]:
    return prompt_calls(n_tokens, llm.n_batch, llm.n_ubatch, llm.checkpointed)


def _timed(llm: LlamaCpu, tokens: list[int], pos0: int, logits: bool) -> float:
    start = time.perf_counter()
    llm.decode(tokens, pos0, logits)
    return time.perf_counter() - start


def _check_lengths(token_lists: list[list[int]], n_predict: int, n_ctx: int) -> None:
    """Every prompt and its generation fit the context (llama-server stops a request that runs out of it)."""
    for i, tokens in enumerate(token_lists, 1):
        if not tokens:
            raise RecordError(f"prompt {i} makes no token")
        if len(tokens) + n_predict > n_ctx:
            raise RecordError(
                f"prompt {i} has {len(tokens):,} tokens: with -n {n_predict:,} it needs -c "
                f"{len(tokens) + n_predict:,} or more (the context holds {n_ctx:,})"
            )
