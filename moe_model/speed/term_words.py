"""Plain words for the time model's terms (time_model's breakdowns), one place every page, chart and command reads.

The keys are the dictionaries `time_model` returns for a decoded ubatch and a prompt ubatch; a term missing here
is shown by its key, so a new term is never hidden.
"""

from __future__ import annotations

DECODE_TERM_WORDS = {
    "fixed": "per-token overhead",
    "sampling": "picking the next token",
    "dense": "dense weights (attention projections, shared experts)",
    "attention": "reading the context (KV cache)",
    "experts_gpu": "experts on the GPU",
    "upload": "uploading missed experts",
    "sync": "waiting between GPU and CPU",
    "experts_cpu": "experts on the CPU",
    "split": "handing layers between GPU and CPU",
    "draft": "the draft model",
    "disk": "reading experts from the drive",
}
PROMPT_TERM_WORDS = {
    "gpu_compute": "prompt maths on the GPU",
    "expert_matmuls": "expert launches on the GPU",
    "copy_from_cache": "copying cached experts",
    "upload": "uploading experts for the prompt",
    "experts_cpu": "experts on the CPU",
    "sync": "waiting between GPU and CPU",
    "fixed": "per-ubatch overhead",
    "attention": "attention over the prompt",
    "disk": "reading experts from the drive",
}

MACHINE_TERM_WORDS = {  # a machine's own terms, as calibrating on its logs fits them (fits.machine_fit.FITTED_TERMS)
    "token_ms": "the fixed time per step",
    "cpu_expert_gbs": "the CPU's expert rate",
    "pinned_gbs": "the upload rate (pinned memory)",
    "pageable_gbs": "the upload rate",
    "sync_us": "the per-step sync time of each cached layer",
}


def term_words(term: str, prompt: bool = False) -> str:
    """The plain words for a breakdown key (the key itself if it has none)."""
    return (PROMPT_TERM_WORDS if prompt else DECODE_TERM_WORDS).get(term, term)
