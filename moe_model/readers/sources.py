"""Which server-local paths and URLs a deployment reads: an allow-list policy, and one-line refusals.

Reading a path or fetching a URL on behalf of a visitor is a deployment choice. By default local
paths are limited to the bundled sample data and URLs to public http(s) hosts; both are off when
the app is bound beyond localhost unless a setting turns them on (an environment variable, or the
[moe_explorer] table of the app's secrets). A refusal never echoes file contents and says the same for
a missing and an existing file outside the allowed folders.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import urllib.parse
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from moe_model.errors import SourceError
from moe_model.limits import MAX_PATH_CHARS
from moe_model.readers.http import CREDENTIALS_REFUSED, has_credentials
from moe_model.resources import sample_data_root

SAMPLE_DATA = sample_data_root().resolve()
LOCAL_ADDRESSES = ("localhost", "127.0.0.1", "::1")
NAT64_LOCAL = ipaddress.IPv6Network("64:ff9b:1::/48")  # RFC 8215 local-use NAT64: a site's own translator
NAT64_WELL_KNOWN = ipaddress.IPv6Network("64:ff9b::/96")  # RFC 6052: the IPv4 address is the last 32 bits
IPV4_COMPATIBLE = ipaddress.IPv6Network("::/96")  # deprecated ::a.b.c.d (RFC 4291)
IPV4_TRANSLATED = ipaddress.IPv6Network("::ffff:0:0:0/96")  # SIIT's ::ffff:0:a.b.c.d (RFC 2765)
ENV_PATHS = "MOE_EXPLORER_PATHS"  # on/off: read server-local paths
ENV_DIRS = "MOE_EXPLORER_ALLOWED_DIRS"  # extra folders, separated like PATH
ENV_URLS = "MOE_EXPLORER_URLS"  # on/off: fetch http(s) URLs
ENV_PRIVATE = "MOE_EXPLORER_PRIVATE_URLS"  # on/off: URLs to loopback, private and link-local hosts
SECRETS_TABLE = "moe_explorer"  # [moe_explorer] in .streamlit/secrets.toml: the same settings, named below
SECRET_KEYS = {ENV_PATHS: "paths", ENV_DIRS: "allowed_dirs", ENV_URLS: "urls", ENV_PRIVATE: "private_urls"}


@dataclass(frozen=True)
class SourcePolicy:
    allowed_dirs: tuple[Path, ...]
    paths: bool
    urls: bool
    private_hosts: bool


def _flag(env: Mapping[str, str], name: str, default: bool) -> bool:
    value = env.get(name, "").strip().lower()
    if not value:
        return default
    if value in ("1", "on", "true", "yes"):
        return True
    if value in ("0", "off", "false", "no"):
        return False
    raise SourceError(f"{name} must be on or off, got {value[:20]!r}")


def deployment_settings(env: Mapping[str, str], secrets: Mapping[str, Any]) -> dict[str, str]:
    """The MOE_EXPLORER_* settings: each from the environment where set, else from the secrets' [moe_explorer]
    table (true/false or on/off; allowed_dirs a list of folders or one PATH-like string)."""
    table = secrets.get(SECRETS_TABLE, {})
    if not isinstance(table, Mapping):
        raise SourceError(f"[{SECRETS_TABLE}] in the secrets must be a table of settings")
    out = {}
    for name, key in SECRET_KEYS.items():
        if env.get(name, "").strip():
            out[name] = env[name]
        elif key in table:
            out[name] = _setting_text(key, table[key])
    return out


def _setting_text(key: str, value: Any) -> str:
    """A TOML value as the environment would spell it."""
    if isinstance(value, bool):
        return "on" if value else "off"
    if isinstance(value, str):
        return value
    if isinstance(value, list) and all(isinstance(v, str) for v in value):
        return os.pathsep.join(value)
    raise SourceError(f"{SECRETS_TABLE}.{key} must be true/false, a string or a list of folders")


def policy_from_env(bind_address: str | None, env: Mapping[str, str] | None = None) -> SourcePolicy:
    """The policy for an app bound to `bind_address` (None or "" is every interface), from the environment
    (or from `env`, e.g. deployment_settings)."""
    env = dict(os.environ) if env is None else env
    local = (bind_address or "") in LOCAL_ADDRESSES
    extra = tuple(Path(d).expanduser().resolve() for d in env.get(ENV_DIRS, "").split(os.pathsep) if d.strip())
    return SourcePolicy(
        allowed_dirs=(SAMPLE_DATA, *extra),
        paths=_flag(env, ENV_PATHS, local),
        urls=_flag(env, ENV_URLS, local),
        private_hosts=_flag(env, ENV_PRIVATE, False),
    )


def is_url_text(text: str) -> bool:
    return "://" in text[:16]


def check_url(url: str, private_hosts: bool = False) -> tuple[str, ...] | None:
    """Refuse anything but http(s), credentials in the URL, and, unless allowed, hosts that resolve to a
    non-public address (an IPv4 address inside an IPv6 one is judged as itself).

    Returns the addresses checked, for the connection to use and never resolve again (a second DNS answer
    could point elsewhere: DNS rebinding); None when private hosts are allowed and any address will do.
    """
    try:
        parts = urllib.parse.urlsplit(url)
        port = parts.port or (443 if parts.scheme == "https" else 80)
    except ValueError:
        raise SourceError("not a valid URL") from None
    if parts.scheme.lower() not in ("http", "https") or not parts.hostname:
        raise SourceError("only http:// and https:// URLs are read")
    if has_credentials(url):
        raise SourceError(CREDENTIALS_REFUSED)
    if private_hosts:
        return None
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (OSError, UnicodeError):
        raise SourceError(f"cannot resolve the host {parts.hostname[:100]}") from None
    addresses = tuple(dict.fromkeys(info[4][0] for info in infos))
    for address in addresses:
        if not is_public(ipaddress.ip_address(address.split("%", 1)[0])):
            raise SourceError(
                f"{parts.hostname[:100]} is a local or private address: this deployment fetches public hosts only "
                f"(its operator allows private ones with {ENV_PRIVATE}=on, or {SECRET_KEYS[ENV_PRIVATE]} = true "
                f"under [{SECRETS_TABLE}] in .streamlit/secrets.toml)"
            )
    return addresses


def is_public(ip: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    """A global address, and so is any IPv4 address it carries (mapped, translated, compatible, NAT64, 6to4,
    Teredo); never a site-local one (fec0::/10, deprecated by RFC 3879 yet routed inside a site: Python calls it
    global)."""
    if not ip.is_global:
        return False
    if isinstance(ip, ipaddress.IPv4Address):
        return True
    if ip in NAT64_LOCAL or ip.is_site_local:
        return False
    return all(inner.is_global for inner in _embedded_ipv4(ip))


def _embedded_ipv4(ip: ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address routes to (a translator or tunnel delivers to them)."""
    last_32 = ipaddress.IPv4Address(int(ip) & 0xFFFFFFFF)
    inner = [ip.ipv4_mapped, ip.sixtofour, *(ip.teredo or ())]
    if ip in NAT64_WELL_KNOWN or ip in IPV4_COMPATIBLE or ip in IPV4_TRANSLATED:
        inner.append(last_32)
    return [address for address in inner if address is not None]


def resolve_source(text: str, policy: SourcePolicy) -> str:
    """A URL checked against the policy, or the resolved path of a file inside an allowed folder."""
    if len(text) > MAX_PATH_CHARS:
        raise SourceError(f"the path or URL is longer than {MAX_PATH_CHARS:,} characters")
    if is_url_text(text):
        if not policy.urls:
            raise SourceError(f"this deployment does not fetch URLs (set {ENV_URLS}=on to allow them)")
        check_url(text, policy.private_hosts)
        return text
    return check_path(text, policy)


def check_path(text: str, policy: SourcePolicy) -> str:
    """The resolved path of a regular file inside an allowed folder; a missing file and one outside them get the
    same refusal. Every shard of a split model is checked with it, like the first."""
    if len(text) > MAX_PATH_CHARS:
        raise SourceError(f"the path is longer than {MAX_PATH_CHARS:,} characters")
    if not policy.paths:
        raise SourceError(f"this deployment does not read server paths (set {ENV_PATHS}=on to allow them)")
    try:
        path = Path(text).expanduser().resolve()  # symlinks resolved: a link cannot lead out of a folder
    except (OSError, RuntimeError, ValueError):
        path = None
    if path is None or not any(path.is_relative_to(d) for d in policy.allowed_dirs):
        folders = ", ".join("the bundled data" if d == SAMPLE_DATA else d.name for d in policy.allowed_dirs)
        raise SourceError(f"only files in the allowed folders ({folders}) are read; add folders with {ENV_DIRS}")
    if not path.is_file():
        raise SourceError(f"no such file in the allowed folders: {path.name}")
    return str(path)
