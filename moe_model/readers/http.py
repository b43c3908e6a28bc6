"""Read a byte prefix of a URL: HTTP(S) Range requests with checked redirects, pinned addresses, timeouts and a
deadline.

The transport behind `readers.gguf.read_header` for `http(s)://` sources; which URLs are allowed is
`readers.sources`' job (passed in as `check_url`). A URL with a user name or password is refused here, for every
caller and every redirect, and never quoted.
"""

from __future__ import annotations

import contextlib
import http.client
import shlex
import socket
import threading
import time
import urllib.error
import urllib.parse
import urllib.request
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from moe_model.errors import GGUFError, one_line
from moe_model.limits import (
    HEADER_PREFIX_MIB,
    MAX_REDIRECTS,
    URL_CONNECT_TIMEOUT_S,
    URL_DEADLINE_S,
    URL_READ_TIMEOUT_S,
    shown,
)

URL_TIMEOUTS = (URL_CONNECT_TIMEOUT_S, URL_READ_TIMEOUT_S)  # (connect, each read) in seconds
READ_CHUNK_BYTES = 1024 * 1024
CheckUrl = Callable[[str], Sequence[str] | None]  # vets a URL: raises, or names the only addresses to connect to
CREDENTIALS_REFUSED = "URLs with a user name or password are not read: give the address without them"


@dataclass(frozen=True)
class Deadline:
    """An instant (time.monotonic) by which reading must end, and what it bounds (said when it is missed)."""

    at: float
    what: str

    @classmethod
    def after(cls, seconds: float, what: str) -> Deadline:
        return cls(time.monotonic() + seconds, what)

    def left_s(self) -> float:
        return self.at - time.monotonic()

    def sooner(self, other: Deadline | None) -> Deadline:
        return self if other is None or self.at <= other.at else other


def has_credentials(url: str) -> bool:
    """Whether a URL names a user or a password before its host (`http://user:pw@host/`)."""
    try:
        return "@" in urllib.parse.urlsplit(url).netloc
    except ValueError:
        return False


class _CheckedRedirects(urllib.request.HTTPRedirectHandler):
    """Follows at most MAX_REDIRECTS redirects, each to http(s) only and checked like the first URL."""

    max_redirections = MAX_REDIRECTS

    def __init__(self, check_url: Callable[[str], None]) -> None:
        self.check_url = check_url

    def redirect_request(self, req, fp, code, msg, headers, newurl):  # noqa: ANN001 - urllib's signature
        try:
            if not is_url(newurl):
                raise GGUFError("the server redirected to a URL that is not http(s); only http(s) is followed")
            self.check_url(newurl)
        except Exception:
            fp.close()  # urllib closes a redirect's response only when it follows it: its socket would wait for GC
            raise
        return super().redirect_request(req, fp, code, msg, headers, newurl)


class _Watchdog:
    """Shuts the connections of one read down at its deadline, whatever they wait for: a server dripping a byte
    at a time keeps every wait within the read timeout, so only a clock outside the read can end it."""

    def __init__(self, deadline: Deadline) -> None:
        self.deadline = deadline
        self.expired = False
        self._sockets: list[socket.socket] = []
        self._lock = threading.Lock()
        self._timer = threading.Timer(max(0.0, deadline.left_s()), self._expire)
        self._timer.daemon = True

    def __enter__(self) -> _Watchdog:
        self._timer.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self._timer.cancel()
        with self._lock:
            for sock in self._sockets:
                sock.close()
            self._sockets.clear()

    def watch(self, sock: socket.socket) -> None:
        with self._lock:
            self._sockets.append(sock.dup())  # TLS takes the socket object over; a duplicate still reaches it
            if self.expired:
                self._shut(self._sockets[-1])

    def _expire(self) -> None:
        with self._lock:
            self.expired = True
            for sock in self._sockets:
                self._shut(sock)

    @staticmethod
    def _shut(sock: socket.socket) -> None:
        with contextlib.suppress(OSError):  # already closed by the read that finished
            sock.shutdown(socket.SHUT_RDWR)  # wakes a blocked read: it returns end of data


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


def _dialer(
    pins: dict[str, tuple[str, ...]], timeouts: tuple[float, float], watch: Callable[[socket.socket], None]
) -> Callable[..., socket.socket]:
    """Open a socket to a host's checked addresses (`pins`; the host's own resolution when it has none) within
    the connect timeout, then wait at most the read timeout for each read; `watch` sees every socket opened."""
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
                watch(sock)
                return sock
        raise error

    return dial


def only_http(url: str) -> None:
    if not is_url(url):
        raise GGUFError("only http:// and https:// URLs are read")


def read_url_prefix(
    url: str, timeouts: tuple[float, float], check_url: CheckUrl, deadline: Deadline | None = None
) -> Callable[[int], bytes]:
    """A function reading the first n bytes of `url`; each read ends by URL_DEADLINE_S or `deadline` if sooner."""
    pins: dict[str, tuple[str, ...]] = {}  # host -> the addresses check_url vetted: never resolved a second time

    def vet(target: str) -> None:
        if has_credentials(target):  # urllib would connect to the name "user:pw@host" and quote it in errors
            raise GGUFError(CREDENTIALS_REFUSED)
        addresses = check_url(target)
        host = (urllib.parse.urlsplit(target).hostname or "").lower()
        if addresses is None:
            pins.pop(host, None)
        else:
            pins[host] = tuple(addresses)

    vet(url)
    host = shown(urllib.parse.urlsplit(url).hostname or url)

    def read(n: int) -> bytes:
        limit = Deadline.after(URL_DEADLINE_S, f"{URL_DEADLINE_S:.0f} s for one read").sooner(deadline)
        with _Watchdog(limit) as watchdog:
            try:
                data = _fetch(_opener(pins, timeouts, vet, watchdog.watch), url, n, host)
            except (GGUFError, urllib.error.URLError, TimeoutError, OSError, http.client.HTTPException) as err:
                if isinstance(err, urllib.error.HTTPError):
                    err.close()  # it holds the response, and the response its socket
                if watchdog.expired:  # whatever the cut-off connection looked like (a header left half-read)
                    raise GGUFError(_too_slow(host, limit)) from None
                if isinstance(err, GGUFError):
                    raise
                raise _transport_error(err, url, host, timeouts[1]) from None
            if watchdog.expired and len(data) < n:  # the shut-down connection looked like the end of the data
                raise GGUFError(_too_slow(host, limit))
            return data

    return read


def _opener(
    pins: dict[str, tuple[str, ...]],
    timeouts: tuple[float, float],
    vet: Callable[[str], None],
    watch: Callable[[socket.socket], None],
) -> urllib.request.OpenerDirector:
    dial = _dialer(pins, timeouts, watch)
    handlers = [_CheckedRedirects(vet), _HTTPHandler(dial), _HTTPSHandler(dial)]
    if pins:  # a proxy would resolve the host again itself, past the check
        handlers.append(urllib.request.ProxyHandler({}))
    return urllib.request.build_opener(*handlers)


def _fetch(opener: urllib.request.OpenerDirector, url: str, n: int, host: str) -> bytes:
    """The first n bytes by one Range request (fewer where the file is shorter), read in pieces as they arrive."""
    request = urllib.request.Request(url, headers={"Range": f"bytes=0-{n - 1}", "User-Agent": "moe-cache-explorer"})
    with opener.open(request) as response:
        content_range = response.headers.get("Content-Range", "bytes 0-")
        if response.status != 206 or not content_range.startswith("bytes 0-"):
            raise GGUFError(
                f"{host} does not honour HTTP Range requests (status {response.status}), so `curl -r` would "
                f"download the whole file: stream its start instead, `{prefix_command(url)}` (curl stops once "
                f"head has {HEADER_PREFIX_MIB} MiB), and upload that prefix"
            )
        chunks, have = [], 0
        while have < n:
            chunk = response.read1(min(n - have, READ_CHUNK_BYTES))  # what has arrived, not a wait for all of it
            if not chunk:
                break
            chunks.append(chunk)
            have += len(chunk)
        return b"".join(chunks)


def _too_slow(host: str, deadline: Deadline) -> str:
    return f"{host} had not sent the header by the deadline ({deadline.what}): too slow, abandoned"


def _transport_error(err: Exception, url: str, host: str, read_s: float) -> GGUFError:
    """One line for what urllib, http.client or the socket raised."""
    if isinstance(err, urllib.error.HTTPError):
        if 300 <= err.code < 400:  # urllib refuses these before asking the redirect handler
            return GGUFError(
                f"refused a redirect from {shown(url)}: not to http(s), a loop, or more than {MAX_REDIRECTS}"
            )
        return GGUFError(f"HTTP {err.code} for {shown(url)}")
    reason = getattr(err, "reason", err)
    if isinstance(reason, TimeoutError):  # connected (a connect timeout is its own GGUFError), then silence
        return GGUFError(f"{host} sent nothing for {read_s:g} s (read timeout)")
    return GGUFError(f"cannot read {shown(url)}: {one_line(reason)}")


def prefix_command(source: str = "model.gguf") -> str:
    """The shell line that makes a header prefix the reader takes, of a file or of a URL: a download piped
    through `head -c` ends once head has the prefix, from any server (`curl -r` does so only where it has Range)."""
    prefix = f"head -c {HEADER_PREFIX_MIB}M"
    if is_url(source):
        return f"curl -sL {shlex.quote(shown(source))} | {prefix} > header.gguf"
    return f"{prefix} {shlex.quote(source)} > header.gguf"


def is_url(source: object) -> bool:
    return isinstance(source, str) and source.lower().startswith(("http://", "https://"))
