"""Read a byte prefix of a URL: HTTP(S) Range requests with checked redirects, pinned addresses and timeouts.

The transport behind `readers.gguf.read_header` for `http(s)://` sources; which URLs are allowed is
`readers.sources`' job (passed in as `check_url`).
"""

from __future__ import annotations

import http.client
import socket
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence

from moe_model.errors import GGUFError, one_line
from moe_model.limits import (
    MAX_REDIRECTS,
    URL_CONNECT_TIMEOUT_S,
    URL_DEADLINE_S,
    URL_READ_TIMEOUT_S,
)

URL_TIMEOUTS = (URL_CONNECT_TIMEOUT_S, URL_READ_TIMEOUT_S)  # (connect, each read) in seconds
READ_CHUNK_BYTES = 1024 * 1024
CheckUrl = Callable[[str], Sequence[str] | None]  # vets a URL: raises, or names the only addresses to connect to


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows at most MAX_REDIRECTS redirects, each to http(s) only and checked like the first URL."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, check_url: Callable[[str], None]) -> None:
        self.check_url = check_url

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        if not is_url(newurl):
            raise GGUFError("the server redirected to a URL that is not http(s); only http(s) is followed")
        self.check_url(newurl)
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Dialling:
    """A urllib handler whose connections open their socket through `dial` (checked addresses, two timeouts)."""

    def __init__(self, dial: Callable[..., socket.socket]) -> None:
        super().__init__()
        self.dial = dial

    def do_open(self, http_class, req, **kwargs):  # noqa: ANN001 - urllib's signature
        def connection(host: str, **conn_kwargs) -> http.client.HTTPConnection:
            conn = http_class(host, **conn_kwargs)
            conn._create_connection = self.dial  # http.client's seam: connect() opens its socket through it
            return conn

        return super().do_open(connection, req, **kwargs)


class _HTTPHandler(_Dialling, urllib.request.HTTPHandler):
    pass


class _HTTPSHandler(_Dialling, urllib.request.HTTPSHandler):
    pass


def _dialer(pins: dict[str, tuple[str, ...]], timeouts: tuple[float, float]) -> Callable[..., socket.socket]:
    """Open a socket to a host's checked addresses (`pins`; the host's own resolution when it has none) within
    the connect timeout, then wait at most the read timeout for each read."""
    connect_s, read_s = timeouts

    def dial(address: tuple[str, int], _timeout: object = None, _source: object = None) -> socket.socket:
        host, port = address
        error: Exception = OSError(f"no address to connect to for {host}")
        for target in pins.get(host.lower(), (host,)):
            try:
                sock = socket.create_connection((target, port), connect_s)
            except TimeoutError:
                error = GGUFError(f"cannot connect to {host} within {connect_s:g} s (connect timeout)")
            except OSError as err:
                error = err
            else:
                sock.settimeout(read_s)
                return sock
        raise error

    return dial


def only_http(url: str) -> None:
    if not is_url(url):
        raise GGUFError("only http:// and https:// URLs are read")


def read_url_prefix(url: str, timeouts: tuple[float, float], check_url: CheckUrl) -> Callable[[int], bytes]:
    pins: dict[str, tuple[str, ...]] = {}  # host -> the addresses check_url vetted: never resolved a second time

    def vet(target: str) -> None:
        addresses = check_url(target)
        host = (urllib.parse.urlsplit(target).hostname or "").lower()
        if addresses is None:
            pins.pop(host, None)
        else:
            pins[host] = tuple(addresses)

    vet(url)
    dial = _dialer(pins, timeouts)
    handlers = [_CheckedRedirects(vet), _HTTPHandler(dial), _HTTPSHandler(dial)]
    if pins:  # a proxy would resolve the host again itself, past the check
        handlers.append(urllib.request.ProxyHandler({}))
    opener = urllib.request.build_opener(*handlers)
    host = urllib.parse.urlsplit(url).hostname or url

    def read(n: int) -> bytes:
        request = urllib.request.Request(url, headers={"Range": f"bytes=0-{n - 1}", "User-Agent": "moe-cache-explorer"})
        deadline = time.monotonic() + URL_DEADLINE_S
        try:
            with opener.open(request) as response:
                content_range = response.headers.get("Content-Range", "bytes 0-")
                if response.status != 206 or not content_range.startswith("bytes 0-"):
                    raise GGUFError(
                        f"{host} does not honour HTTP Range requests (status {response.status}); download the "
                        f"first {_mib(n)} MiB (curl -r 0-{n - 1}) and upload that prefix instead"
                    )
                chunks, have = [], 0
                while have < n:  # bounded by bytes and by time: a dripping server cannot hold the session
                    if time.monotonic() > deadline:
                        raise GGUFError(f"{host} sent {have:,} bytes in {URL_DEADLINE_S:.0f} s: too slow")
                    chunk = response.read(min(n - have, READ_CHUNK_BYTES))
                    if not chunk:
                        break
                    chunks.append(chunk)
                    have += len(chunk)
                return b"".join(chunks)
        except urllib.error.HTTPError as err:
            if 300 <= err.code < 400:  # urllib refuses these before asking the redirect handler
                raise GGUFError(
                    f"refused a redirect from {url}: not to http(s), a loop, or more than {MAX_REDIRECTS}"
                ) from None
            raise GGUFError(f"HTTP {err.code} for {url}") from None
        except (urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as err:
            reason = getattr(err, "reason", err)
            if isinstance(reason, TimeoutError):  # connected (a connect timeout is its own GGUFError), then silence
                raise GGUFError(f"{host} sent nothing for {timeouts[1]:g} s (read timeout)") from None
            raise GGUFError(f"cannot read {url}: {one_line(reason)}") from None

    return read


def is_url(source: object) -> bool:
    return isinstance(source, str) and source.lower().startswith(("http://", "https://"))


def _mib(n: int) -> int:
    return max(1, -(-n // 2**20))
