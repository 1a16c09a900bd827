"""The compiler's process-wide memos, and one call that forgets them all.

Several stages remember what they worked out for a shape on a target (a tiling choice, the
price of a tile program, the code a depthwise schedule encodes to, a fused band's plan), so
that a network's repeated blocks and the alternatives a search compares share the work.  Each
such memo is a :class:`Memo`: bounded (it forgets everything when full, so a long-lived process
does not grow without end) and registered here, so that :func:`forget_all` returns the process
to what a fresh one knows.  Benchmarks that time compiles call it before each
(``bench/vela_compile_time.cold_start``); tests that compare a cold compile with a warm one
may too.  A memo with its own structure registers its clearing function with :func:`on_forget`.

A memo only ever holds pure functions of its key: forgetting one changes how long a compile
takes, never what it produces.
"""

from __future__ import annotations

from typing import Callable, TypeVar

K = TypeVar("K")
V = TypeVar("V")

_FORGET: list[Callable[[], None]] = []


class Memo(dict[K, V]):
    """A dict that holds at most ``limit`` entries: :meth:`put` forgets them all first when
    full (the keys of one network come back together; an eviction order buys nothing here)."""

    def __init__(self, limit: int, name: str) -> None:
        super().__init__()
        self.limit = limit
        self.name = name
        _FORGET.append(self.clear)

    def put(self, key: K, value: V) -> V:
        """Remember ``value`` under ``key`` (forgetting everything first when full); returns it."""
        if len(self) >= self.limit:
            self.clear()
        self[key] = value
        return value

    def __repr__(self) -> str:
        return f"Memo({self.name!r}, {len(self)} of {self.limit})"

    # a memo is process state, compared and hashed by identity
    __eq__ = object.__eq__  # type: ignore[assignment]
    __hash__ = object.__hash__  # type: ignore[assignment]


def on_forget(clear: Callable[[], None]) -> Callable[[], None]:
    """Register ``clear`` (a memo's own clearing function) to run in :func:`forget_all`; returns it,
    so it can decorate the function."""
    _FORGET.append(clear)
    return clear


def forget_all() -> None:
    """Forget every memo of the modules imported so far (a module not yet imported holds none)."""
    for clear in _FORGET:
        clear()
