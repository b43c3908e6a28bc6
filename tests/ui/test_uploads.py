"""A session's uploads (ui/uploads.py): kept once by content, bounded in bytes, named in links."""

from __future__ import annotations

import pytest

from ui.uploads import UploadError, UploadStore, parse_url_value


def test_the_same_bytes_are_kept_once_and_removed_by_digest():
    store = UploadStore(budget_bytes=100)
    first = store.add("log", "a.log", b"x" * 10)
    again = store.add("log", "renamed.log", b"x" * 10)
    assert again is first and store.used_bytes == 10 and [u.name for u in store.of_kind("log")] == ["a.log"]
    store.remove(first.digest)
    assert not store.items and store.get(first.digest) is None


def test_an_upload_past_the_byte_budget_is_refused_in_one_line_and_nothing_is_dropped():
    store = UploadStore(budget_bytes=100)
    store.add("header", "h.gguf", b"h" * 60)
    with pytest.raises(UploadError, match=r"^big\.log .* remove one in the sidebar first$"):
        store.add("log", "big.log", b"l" * 41)
    assert [u.name for u in store.items.values()] == ["h.gguf"] and store.used_bytes == 60


def test_an_unknown_kind_is_refused():
    with pytest.raises(UploadError, match="unknown upload kind"):
        UploadStore().add("model", "m", b"1")


def test_a_link_names_the_upload_by_digest_and_name():
    upload = UploadStore().add("header", "my: model.gguf", b"GGUF")
    assert upload.url_value == f"upload:{upload.digest}:my: model.gguf"
    assert parse_url_value(upload.url_value) == (upload.digest, "my: model.gguf")
    assert parse_url_value("Qwen3-30B-A3B-Q4_K_M.gguf") is None
