"""A session's own files (GGUF headers, logs, traces, CPU runs): kept by content digest across pages until the user
removes them, bounded in bytes (moe_model.limits.MAX_SESSION_UPLOAD_BYTES), named in the sidebar and
marked in the URL as `upload:<digest>:<name>` (a copied link cannot carry the bytes, so it says so)."""

from __future__ import annotations

from dataclasses import dataclass, field

import streamlit as st

from moe_model.errors import MoeModelError
from moe_model.limits import MAX_SESSION_UPLOAD_BYTES, shown
from ui.cached import content_key
from ui.text import literal

KINDS = ("header", "log", "trace", "host")  # host: the user's CPU run (ui.host_run)
URL_PREFIX = "upload:"


class UploadError(MoeModelError):
    """An upload the session cannot keep (over the byte budget, an unknown kind)."""


@dataclass(frozen=True)
class Upload:
    kind: str
    name: str
    digest: str  # content_key(data), computed once
    data: bytes = field(repr=False)

    @property
    def url_value(self) -> str:
        """How a link names it: the digest says which file, the name what to upload again."""
        return f"{URL_PREFIX}{self.digest}:{self.name}"

    @property
    def label(self) -> str:
        return f"{self.name} (uploaded)"


@dataclass
class UploadStore:
    """The uploads of one session in the order they came, at most `budget_bytes` together."""

    budget_bytes: int = MAX_SESSION_UPLOAD_BYTES
    items: dict[str, Upload] = field(default_factory=dict)  # digest -> upload

    @property
    def used_bytes(self) -> int:
        return sum(len(u.data) for u in self.items.values())

    def add(self, kind: str, name: str, data: bytes) -> Upload:
        """Keep an upload (the same bytes twice are kept once); refuse one that would pass the budget."""
        if kind not in KINDS:
            raise UploadError(f"unknown upload kind {kind!r}: one of {', '.join(KINDS)}")
        upload = Upload(kind, name, content_key(data), data)
        if upload.digest in self.items:
            return self.items[upload.digest]
        if self.used_bytes + len(data) > self.budget_bytes:
            raise UploadError(
                f"{shown(name)} ({len(data) / 2**20:.1f} MiB) would take this session's uploads past "
                f"{self.budget_bytes / 2**20:.0f} MiB: remove one in the sidebar first"
            )
        self.items[upload.digest] = upload
        return upload

    def remove(self, digest: str) -> None:
        self.items.pop(digest, None)

    def of_kind(self, kind: str) -> list[Upload]:
        return [u for u in self.items.values() if u.kind == kind]

    def get(self, digest: str) -> Upload | None:
        return self.items.get(digest)


def parse_url_value(value: str) -> tuple[str, str] | None:
    """(digest, name) of a link's `upload:<digest>:<name>`, None for any other value."""
    if not value.startswith(URL_PREFIX):
        return None
    digest, _, name = value.removeprefix(URL_PREFIX).partition(":")
    return digest, name or "a file"


def session_uploads() -> UploadStore:
    """This session's store (created on first use)."""
    return st.session_state.setdefault("uploads", UploadStore())


def keep_upload(kind: str, name: str, data: bytes) -> Upload | None:
    """Add to this session's store; a refusal is shown as one line and nothing is kept."""
    try:
        return session_uploads().add(kind, name, data)
    except UploadError as err:
        st.error(literal(err, None))
        return None


def uploader_key(base: str) -> str:
    """A file uploader's key, renewed when an upload is removed so that the widget lets go of it too."""
    return f"{base}_{st.session_state.get('upload_generation', 0)}"


def _remove(digest: str) -> None:
    session_uploads().remove(digest)
    kept = st.session_state.setdefault("kept", {})
    if str(kept.get("model", "")).startswith(f"{URL_PREFIX}{digest}:"):  # removed by the user: not "needed again"
        kept.pop("model")
        st.query_params.pop("model", None)
    st.session_state["upload_generation"] = st.session_state.get("upload_generation", 0) + 1


def sidebar_uploads() -> None:
    """Name every kept upload in the sidebar, each with a button that removes it."""
    store = session_uploads()
    if not store.items:
        return
    box = st.sidebar.expander(f"your uploads ({store.used_bytes / 2**20:.1f} MiB, kept until removed)", True)
    for upload in store.items.values():
        left, right = box.columns([4, 1])
        left.caption(f"{upload.kind}: {literal(upload.name)} ({len(upload.data) / 1024:,.0f} KiB)")
        right.button("✕", key=f"rm_{upload.digest}", on_click=_remove, args=(upload.digest,), help="remove")


def trace_upload(box=st) -> Upload | None:
    """A routing trace uploaded (a recorded `record` trace, .npz or .csv), kept for the session: the latest one is
    replayed, on Explore and Shopping alike."""
    new = box.file_uploader("trace (.npz or .csv)", key=uploader_key("trace_upload"))
    if new is not None:
        return keep_upload("trace", new.name, new.getvalue())
    held = session_uploads().of_kind("trace")
    return held[-1] if held else None
