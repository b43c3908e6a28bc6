"""Which paths and URLs the app reads: allowed folders, public hosts, off beyond localhost, no oracle, no echo."""

from __future__ import annotations

import os
import socket
from pathlib import Path

import pytest
from conftest import GT_HEADER

from moe_model.errors import SourceError
from moe_model.readers.sources import check_url, deployment_settings, policy_from_env, resolve_source

LOCAL = policy_from_env("localhost", {})


def test_bundled_samples_are_read_by_default():
    assert resolve_source(str(GT_HEADER), LOCAL) == str(GT_HEADER.resolve())


@pytest.mark.parametrize("path", ["/etc/shadow", "/proc/self/environ", "/etc/does-not-exist", "/nonexistent/x.gguf"])
def test_outside_the_allowed_folders_existing_and_missing_files_get_the_same_message(path):
    with pytest.raises(SourceError) as info:
        resolve_source(path, LOCAL)
    assert str(info.value) == (
        "only files in the allowed folders (the bundled data) are read; add folders with MOE_EXPLORER_ALLOWED_DIRS"
    )


def test_dot_dot_and_symlinks_cannot_leave_an_allowed_folder(tmp_path):
    (tmp_path / "link.gguf").symlink_to("/etc/hostname")
    policy = policy_from_env("localhost", {"MOE_EXPLORER_ALLOWED_DIRS": str(tmp_path)})
    with pytest.raises(SourceError, match="only files in the allowed folders"):
        resolve_source(str(tmp_path / "link.gguf"), policy)
    with pytest.raises(SourceError, match="only files in the allowed folders"):
        resolve_source(f"{GT_HEADER.parent}/../../../etc/hostname", LOCAL)


def test_a_setting_adds_folders(tmp_path):
    (tmp_path / "m.gguf").write_bytes(b"GGUF")
    policy = policy_from_env("localhost", {"MOE_EXPLORER_ALLOWED_DIRS": str(tmp_path)})
    assert resolve_source(str(tmp_path / "m.gguf"), policy) == str((tmp_path / "m.gguf").resolve())
    with pytest.raises(SourceError, match="no such file in the allowed folders: x.gguf"):
        resolve_source(str(tmp_path / "x.gguf"), policy)


def test_paths_and_urls_are_off_beyond_localhost_unless_turned_on():
    exposed = policy_from_env("0.0.0.0", {})
    with pytest.raises(SourceError, match="does not read server paths"):
        resolve_source(str(GT_HEADER), exposed)
    with pytest.raises(SourceError, match="does not fetch URLs"):
        resolve_source("https://example.com/m.gguf", exposed)
    on = policy_from_env(None, {"MOE_EXPLORER_PATHS": "on", "MOE_EXPLORER_URLS": "on"})
    assert on.paths and on.urls and resolve_source(str(GT_HEADER), on)
    with pytest.raises(SourceError, match="must be on or off"):
        policy_from_env("localhost", {"MOE_EXPLORER_PATHS": "maybe"})


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1:8501/",
        "http://localhost/x.gguf",
        "http://[::1]/x.gguf",
        "http://10.0.0.1/x.gguf",
        "http://169.254.169.254/latest/meta-data/",
        "http://192.168.1.1/x.gguf",
        "http://0.0.0.0/x",
    ],
)
def test_urls_to_local_or_private_hosts_are_refused_unless_allowed(url):
    with pytest.raises(SourceError, match="local or private address"):
        check_url(url)
    check_url(url, private_hosts=True)


@pytest.mark.parametrize("url", ["file:///etc/passwd", "ftp://example.com/x", "gopher://x/", "http://", "http://a:b/"])
def test_only_http_urls_with_a_host_are_accepted(url):
    with pytest.raises(SourceError, match="only http|not a valid URL"):
        resolve_source(url, LOCAL)


def test_settings_come_from_the_environment_first_then_the_secrets_table():
    table = {"paths": False, "urls": True, "allowed_dirs": ["/models", "/data"], "private_urls": "on"}
    secrets = {"moe_explorer": table, "other_app": {"token": "x"}}
    env = {"MOE_EXPLORER_PATHS": "on", "MOE_EXPLORER_URLS": "", "HOME": "/root"}  # an empty variable is unset
    merged = deployment_settings(env, secrets)
    assert merged == {
        "MOE_EXPLORER_PATHS": "on",
        "MOE_EXPLORER_ALLOWED_DIRS": f"/models{os.pathsep}/data",
        "MOE_EXPLORER_URLS": "on",
        "MOE_EXPLORER_PRIVATE_URLS": "on",
    }
    policy = policy_from_env("0.0.0.0", merged)
    assert policy.paths and policy.urls and policy.private_hosts and Path("/data") in policy.allowed_dirs
    assert deployment_settings({}, {}) == {} and deployment_settings({"MOE_EXPLORER_URLS": "off"}, {}) == {
        "MOE_EXPLORER_URLS": "off"
    }
    with pytest.raises(SourceError, match=r"moe_explorer\.urls must be true/false") as info:
        deployment_settings({}, {"moe_explorer": {"urls": 3}})
    assert "\n" not in str(info.value)


def test_a_checked_url_names_the_addresses_it_checked_for_the_connection(monkeypatch):
    answers = {"public.example": "93.184.216.34", "mixed.example": "10.0.0.7"}

    def resolve(host, port, *args, **kwargs):
        return [(socket.AF_INET, socket.SOCK_STREAM, 6, "", (answers.get(host, "93.184.216.34"), port))]

    monkeypatch.setattr(socket, "getaddrinfo", resolve)
    assert check_url("https://public.example/m.gguf") == ("93.184.216.34",)
    assert check_url("https://mixed.example/m.gguf", private_hosts=True) is None  # any address will do
    with pytest.raises(SourceError, match="local or private address"):
        check_url("https://mixed.example/m.gguf")


def _resolving_to(monkeypatch, address: str) -> None:
    family = socket.AF_INET6 if ":" in address else socket.AF_INET
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: [(family, 1, 6, "", (address, port))])


@pytest.mark.parametrize(
    "address",
    [
        "::ffff:169.254.169.254",  # IPv4-mapped
        "::a9fe:a9fe",  # IPv4-compatible ::169.254.169.254
        "64:ff9b::a9fe:a9fe",  # NAT64 well-known prefix
        "64:ff9b::7f00:1",  # NAT64 of 127.0.0.1
        "64:ff9b:1::a00:1",  # local-use NAT64 (RFC 8215)
        "2002:a9fe:a9fe::1",  # 6to4 of 169.254.169.254
        "2002:0a00:0001::1",  # 6to4 of 10.0.0.1
        "::ffff:0:a9fe:a9fe",  # IPv4-translated (SIIT) 169.254.169.254: passed before issue 39
        "fec0::1",  # site-local (fec0::/10): Python calls it global; passed before issue 39
        "fec0::a9fe:a9fe",
    ],
)
def test_a_private_ipv4_address_inside_an_ipv6_one_is_refused(monkeypatch, address):
    _resolving_to(monkeypatch, "::ffff:0:808:808")
    assert check_url("http://cloaked.example/m.gguf")  # positive control: translated 8.8.8.8 is public
    _resolving_to(monkeypatch, address)
    with pytest.raises(SourceError, match="local or private address"):
        check_url("http://cloaked.example/m.gguf")


@pytest.mark.parametrize("address", ["64:ff9b::808:808", "2002:808:808::1", "2606:4700::1111", "93.184.216.34"])
def test_public_addresses_and_public_ipv4_inside_ipv6_are_accepted(monkeypatch, address):
    _resolving_to(monkeypatch, address)
    assert check_url("http://public.example/m.gguf") == (address,)


@pytest.mark.parametrize("url", ["http://user:s3cret@example.com/m.gguf", "https://s3cret@example.com/m.gguf"])
def test_a_url_with_credentials_is_refused_without_quoting_them(url):
    # the app once connected to such a URL past the address pin, and the CLI to the host name "user:s3cret@host"
    for check in (check_url, lambda u: resolve_source(u, LOCAL)):
        with pytest.raises(SourceError) as info:
            check(url)
        assert "user name or password" in str(info.value) and "s3cret" not in str(info.value)


def test_every_shard_of_a_split_model_passes_the_folder_policy(tmp_path):
    from functools import partial

    from conftest import QWEN235B_SHARD1

    from moe_model.readers.model_spec import load_model
    from moe_model.readers.sources import check_path

    allowed, outside = tmp_path / "allowed", tmp_path / "outside"
    allowed.mkdir()
    outside.mkdir()
    shards = sorted(QWEN235B_SHARD1.parent.glob("Qwen3-235B*"))
    (allowed / shards[0].name).write_bytes(shards[0].read_bytes())
    for shard in shards[1:]:  # the other shards are links to files outside the allowed folder
        (outside / shard.name).write_bytes(shard.read_bytes())
        (allowed / shard.name).symlink_to(outside / shard.name)
    policy = policy_from_env("localhost", {"MOE_EXPLORER_ALLOWED_DIRS": str(allowed)})
    first = resolve_source(str(allowed / shards[0].name), policy)
    with pytest.raises(SourceError, match="only files in the allowed folders"):
        load_model(first, check_path=partial(check_path, policy=policy))
    inside = policy_from_env("localhost", {"MOE_EXPLORER_ALLOWED_DIRS": f"{allowed}{os.pathsep}{outside}"})
    assert load_model(first, check_path=partial(check_path, policy=inside)).n_layer == 94  # positive control


def test_the_private_address_refusal_names_the_setting_that_allows_it_in_one_line():
    with pytest.raises(SourceError) as err:
        check_url("http://127.0.0.1/m.gguf")
    said = str(err.value)
    assert "MOE_EXPLORER_PRIVATE_URLS=on" in said and "private_urls = true" in said and "\n" not in said
    assert policy_from_env("localhost", {"MOE_EXPLORER_PRIVATE_URLS": "on"}).private_hosts  # the setting it names


@pytest.mark.parametrize("host", ["[::ffff:0:a9fe:a9fe]", "[fec0::1]"])
def test_the_ipv6_forms_of_issue_39_typed_as_literals_are_refused_with_the_others(host):
    with pytest.raises(SourceError, match="local or private address: this deployment fetches public hosts only"):
        check_url(f"http://{host}/m.gguf")
