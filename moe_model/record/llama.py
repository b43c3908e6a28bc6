"""One llama.cpp model and context on the CPU, driven through llama-cpp-python's low-level API as llama-server
drives its own: batches of at most n_batch tokens (llama.cpp splits them into ubatches of n_ubatch), only the
tokens asked for computing logits, the KV memory cleared between requests."""

from __future__ import annotations

import ctypes
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from moe_model.limits import shown
from moe_model.record.callback import RoutingReader
from moe_model.record.prompts import Prompt
from moe_model.record.runtime import RecordError, Runtime

GGML_LOG_LEVEL_ERROR = 4
FALLBACK_TEMPLATE = b"chatml"  # llama-server's template for a model whose GGUF has none

KEPT_ERRORS = 16  # the first error lines say why; a long run's repeats are not kept
_ERRORS: list[str] = []  # llama.cpp's error lines since the last model began loading
_LOG: list[object] = []  # the one log callback: llama.cpp keeps calling it for the life of the process


def _keep_errors(level: int, text: bytes, _user_data: int) -> None:
    if level == GGML_LOG_LEVEL_ERROR and text and len(_ERRORS) < KEPT_ERRORS:
        _ERRORS.append(text.decode("utf-8", "replace").strip())


def _quiet_llama(low) -> None:
    """llama.cpp's log kept off the terminal, its errors kept for one-line messages; the ctypes callback is made
    once and never freed (a freed one would be called by a later log line)."""
    if not _LOG:
        _LOG.append(low.llama_log_callback(_keep_errors))
    low.llama_log_set(_LOG[0], None)
    _ERRORS.clear()


def model_params(low):
    """llama_model_params as the recorder loads a model: every layer on the CPU, no extra buffer types."""
    params = low.llama_model_default_params()
    params.n_gpu_layers = 0
    # --cpu-moe's experts stay CPU_Mapped (never repacked); 0.3.36's AMX matmul dies with SIGILL on a quantized batch
    params.use_extra_bufts = False
    return params


@dataclass(frozen=True)
class ContextSettings:
    """The server's settings a recording mirrors: context, batch and ubatch sizes, CPU threads."""

    n_ctx: int
    n_batch: int
    n_ubatch: int
    threads: int


class LlamaCpu:
    """A model loaded for the CPU (no layer offloaded) and one context whose eval callback is `reader`'s.
    Use as a context manager: it frees what llama.cpp allocated."""

    def __init__(self, runtime: Runtime, model_path: str | Path, settings: ContextSettings, reader: RoutingReader):
        self.low, self.reader = runtime.llama, reader
        _quiet_llama(self.low)
        self.low.llama_backend_init()
        self.model = self._load_model(Path(model_path))
        self.settings = settings
        try:
            self.ctx = self._new_context(with_callback=True)
        except RecordError:
            self.low.llama_model_free(self.model)
            raise
        self.vocab = self.low.llama_model_get_vocab(self.model)
        self.n_vocab = self.low.llama_vocab_n_tokens(self.vocab)
        self.n_batch = self.low.llama_n_batch(self.ctx)
        self.n_ubatch = self.low.llama_n_ubatch(self.ctx)
        self.n_ctx = self.low.llama_n_ctx(self.ctx)
        self.batch = self.low.llama_batch_init(self.n_batch, 0, 1)
        self.checkpointed = self._needs_checkpoints()
        self.n_layer = self.low.llama_model_n_layer(self.model)
        self.architecture = self._meta("general.architecture")

    def _needs_checkpoints(self) -> bool:
        """llama-server keeps context checkpoints (and cuts prompts for them) for a sliding window (its swa_full
        is off by default) or recurrent / hybrid memory (server-context.cpp, do_checkpoint)."""
        low, model = self.low, self.model
        memory_kept = low.llama_model_is_recurrent(model) or low.llama_model_is_hybrid(model)
        return low.llama_model_n_swa(model) > 0 or bool(memory_kept)

    def _meta(self, key: str) -> str:
        """A string metadata value of the GGUF ("" where it has none)."""
        buf = ctypes.create_string_buffer(256)
        n = self.low.llama_model_meta_val_str(self.model, key.encode(), buf, len(buf))
        return buf.value.decode("utf-8", "replace") if n >= 0 else ""

    def __enter__(self) -> LlamaCpu:
        return self

    def __exit__(self, *_exc) -> None:
        self.low.llama_batch_free(self.batch)
        if self.ctx:
            self.low.llama_free(self.ctx)
        self.low.llama_model_free(self.model)

    @staticmethod
    def _why() -> str:
        return f": {shown(_ERRORS[0])}" if _ERRORS else ""  # the first says why; later ones that it failed

    def _load_model(self, path: Path):
        params = model_params(self.low)
        model = self.low.llama_model_load_from_file(str(path).encode(), params)
        if not model:
            raise RecordError(f"llama.cpp could not load {shown(str(path))}{self._why()}")
        return model

    def without_callback(self) -> None:
        """A fresh context of the same settings with no eval callback: asking about every graph node costs a
        Python call each, and splitting the graph at the nodes read slows it; timings are taken without both."""
        self.low.llama_free(self.ctx)
        self.ctx = None
        self.ctx = self._new_context(with_callback=False)

    def _new_context(self, with_callback: bool):
        settings = self.settings
        params = self.low.llama_context_default_params()
        params.n_ctx, params.n_batch, params.n_ubatch = settings.n_ctx, settings.n_batch, settings.n_ubatch
        params.n_seq_max = 1
        params.n_threads = params.n_threads_batch = settings.threads
        if with_callback:
            params.cb_eval = self.reader.callback
        ctx = self.low.llama_init_from_model(self.model, params)
        if not ctx:
            raise RecordError(f"llama.cpp could not make a context of {settings.n_ctx:,} tokens{self._why()}")
        return ctx

    def special_tokens(self) -> list[int]:
        """BOS and EOS, as llama-server's warm-up decodes them (those the vocabulary has; token 0 if neither)."""
        found = [t for t in (self.low.llama_vocab_bos(self.vocab), self.low.llama_vocab_eos(self.vocab)) if t >= 0]
        return found or [0]

    def is_end(self, token: int) -> bool:
        return bool(self.low.llama_vocab_is_eog(self.vocab, token))

    def tokenize(self, prompt: Prompt) -> list[int]:
        """A prompt's tokens as llama-server's completion endpoint makes them: special tokens added and parsed."""
        raw = (prompt.text if prompt.text is not None else self._chat_text(prompt.messages)).encode("utf-8")
        cap = len(raw) + 8
        while True:
            buf = (self.low.llama_token * cap)()
            n = self.low.llama_tokenize(self.vocab, raw, len(raw), buf, cap, True, True)
            if n >= 0:
                return list(buf[:n])
            cap = -n

    def _chat_text(self, messages: tuple[tuple[str, str], ...]) -> str:
        template = self.low.llama_model_chat_template(self.model, None) or FALLBACK_TEMPLATE
        parts = [(role.encode(), content.encode()) for role, content in messages]
        chat = (self.low.llama_chat_message * len(parts))(*[self.low.llama_chat_message(r, c) for r, c in parts])
        size = 2 * sum(len(r) + len(c) for r, c in parts) + 256
        for _ in range(2):
            buf = ctypes.create_string_buffer(size)
            n = self.low.llama_chat_apply_template(template, chat, len(parts), True, buf, size)
            if n < 0:
                raise RecordError("the model's chat template is not one llama.cpp applies: give prompts as text")
            if n <= size:
                return buf.raw[:n].decode("utf-8", "replace")
            size = n
        raise RecordError("the chat template's output kept growing")

    def clear(self) -> None:
        """Forget every sequence (llama-server with cache_prompt off starts each request from an empty memory)."""
        self.low.llama_memory_clear(self.low.llama_get_memory(self.ctx), True)

    def decode(self, tokens: list[int], pos0: int, logits_last: bool) -> None:
        """One llama_decode of tokens at positions pos0.. of sequence 0; the last token computes logits if asked.
        A batch above n_batch would abort the process inside llama.cpp: refused here."""
        n = len(tokens)
        if not 0 < n <= self.n_batch:
            raise RecordError(f"a batch of {n} tokens does not fit n_batch {self.n_batch}")
        b = self.batch
        for i, token in enumerate(tokens):
            b.token[i], b.pos[i], b.n_seq_id[i], b.logits[i] = token, pos0 + i, 1, 0
            b.seq_id[i][0] = 0
        b.logits[n - 1] = int(logits_last)
        b.n_tokens = n
        rc = self.low.llama_decode(self.ctx, b)
        if rc != 0 and self.reader.error is None:
            raise RecordError(f"llama_decode returned {rc}{self._why()}")

    def greedy(self) -> int:
        """The argmax of the last computed logits (greedy sampling, the first of equal maxima)."""
        logits = self.low.llama_get_logits_ith(self.ctx, -1)
        return int(np.ctypeslib.as_array(logits, shape=(self.n_vocab,)).argmax())
