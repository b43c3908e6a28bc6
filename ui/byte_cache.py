"""A store of results bounded in bytes and age, shared by every session (ui.cached's STORE): least recently used
out beyond its budget, a key being computed computed once while others wait for it."""

from __future__ import annotations

import ctypes
import sys
import threading
import time
from collections import OrderedDict
from collections.abc import Callable
from dataclasses import fields, is_dataclass

import numpy as np

from moe_model.threads import SingleFlight


def nbytes_of(obj) -> int:
    """The bytes an object holds: arrays (a view's base once) and bytes by size, containers, dataclasses and
    other objects by their parts."""
    total, seen, stack = 0, set(), [obj]
    while stack:
        item = stack.pop()
        if isinstance(item, np.ndarray):
            while isinstance(item.base, np.ndarray):
                item = item.base
        if id(item) in seen:
            continue
        seen.add(id(item))
        if isinstance(item, np.ndarray):
            total += item.nbytes
        elif isinstance(item, (bytes, bytearray, str)):
            total += len(item)
        elif isinstance(item, dict):
            stack += [*item.keys(), *item.values()]
        elif isinstance(item, (list, tuple, set, frozenset)):
            stack += list(item)
        elif is_dataclass(item) and not isinstance(item, type):
            stack += [getattr(item, f.name) for f in fields(item)]
        elif hasattr(item, "memory_usage"):  # a pandas frame
            total += int(item.memory_usage(index=True).sum())
        else:
            total += sys.getsizeof(item)
            stack += list(getattr(item, "__dict__", {}).values())
    return total


def release_freed_memory() -> None:
    """Hand freed heap pages back to the system (glibc keeps them otherwise: a server's memory never falls)."""
    try:
        ctypes.CDLL("libc.so.6").malloc_trim(0)
    except (OSError, AttributeError):
        return  # not glibc: its allocator returns memory its own way


class ByteBudgetCache:
    """Results by key, least recently used out beyond max_bytes, none older than ttl_s; a result larger than
    entry_bytes is returned, not kept. The lock guards the dictionary only, never a computation; a key being
    computed is computed once, while other callers wait for it (SingleFlight: after a failure, or a result not
    kept, the next waiter computes it alone)."""

    def __init__(self, max_bytes: int, entry_bytes: int, ttl_s: float) -> None:
        self.max_bytes, self.entry_bytes, self.ttl_s = max_bytes, entry_bytes, ttl_s
        self._entries: OrderedDict[tuple, tuple[object, int, float]] = OrderedDict()
        self._flights = SingleFlight()  # a key being computed: the other callers wait for it
        self._lock = threading.Lock()
        self.nbytes = 0

    def __len__(self) -> int:
        return len(self._entries)

    def lookup(self, key: tuple) -> tuple[bool, object]:
        with self._lock:
            found = self._entries.get(key)
            if found is None or time.monotonic() - found[2] > self.ttl_s:
                return False, None
            self._entries.move_to_end(key)
            return True, found[0]

    def get_or_compute(self, key: tuple, compute: Callable[[], object]) -> tuple[object, bool]:
        """The value, and whether it is kept here (False: too large for this store)."""
        kept = True

        def computed() -> object:
            nonlocal kept
            value = compute()
            kept = self._keep(key, value)
            return value

        return self._flights.get(key, lambda: self.lookup(key), computed), kept

    def _keep(self, key: tuple, value) -> bool:
        size = nbytes_of(value)
        if size > self.entry_bytes:
            return False
        with self._lock:
            self._drop(key)
            self._entries[key] = (value, size, time.monotonic())
            self.nbytes += size
            now, evicted = time.monotonic(), False
            for old in [k for k, (_, _, at) in self._entries.items() if now - at > self.ttl_s]:
                evicted = self._drop(old) or evicted
            while self.nbytes > self.max_bytes:
                evicted = self._drop(next(iter(self._entries))) or evicted
        if evicted:
            release_freed_memory()
        return True

    def _drop(self, key: tuple) -> bool:
        if key not in self._entries:
            return False
        self.nbytes -= self._entries.pop(key)[1]
        return True

    def clear(self, prefix: str | None = None) -> None:
        with self._lock:
            for key in [k for k in self._entries if prefix is None or k[0] == prefix]:
                self._drop(key)
        release_freed_memory()
