"""Slow callbacks: steps that held Home Assistant's event loop for too long.

asyncio's debug mode reports each callback that runs longer than
``slow_callback_duration`` (0.1 s by default), but debug mode itself slows
everything it measures. This monitor does the same job cheaply: it times
every callback the loop runs (``asyncio.Handle._run``: plain callbacks and
each step of every task), and a watchdog thread looks at the loop thread's
stack while a callback runs past :data:`SLOW`, so that a slow callback is
named by the code that was running, not only by the task it belonged to.

A slow callback is *ours* when the integration's code
(``custom_components/xiaozhi``) was on the stack and the loop thread spent
20 ms of CPU time in it: our code ran long. One that was slow on the clock
only (it waited for a core the benchmark's device processes used, or for
the interpreter's lock) is counted apart as *starved*, and named too. A
garbage collection inside a callback is counted apart: it is the
interpreter's pause, whoever triggered it.
"""

import asyncio
from collections import Counter
from dataclasses import dataclass, field
import gc
import os
from pathlib import Path
import sys
import threading
import time
from types import FrameType
from typing import Any, Final

# asyncio's own threshold for a slow callback, as the issue sets it: 20 ms
# on a 2-core machine.
SLOW: Final = 0.02
# How often the watchdog looks at a running callback.
SAMPLE_EVERY: Final = 0.005
OURS: Final = f"{os.sep}custom_components{os.sep}xiaozhi{os.sep}"
ROOT: Final = f"{Path(__file__).resolve().parent.parent}{os.sep}"


@dataclass(slots=True)
class SlowCallback:
    """One callback that ran past :data:`SLOW`."""

    seconds: float
    cpu_seconds: float  # the loop thread's own CPU time meanwhile
    gc_seconds: float
    what: str  # the task's coroutine, or the callback
    where: list[str]  # the integration's frames seen while it ran, innermost first
    top: str  # the innermost frame seen
    owned: bool  # the task's coroutine or the callback is the integration's

    @property
    def involves_us(self) -> bool:
        """Return True when the integration's code was running (not a collection)."""
        return (bool(self.where) or self.owned) and not self.gc_made

    @property
    def ours(self) -> bool:
        """Return True when the integration's code itself ran long.

        The loop thread's CPU time says it: a callback that waited for the
        CPU (other processes on the machine) or for the interpreter's lock
        (a thread) ran long on the clock without running long itself.
        """
        return self.involves_us and self.cpu_seconds >= SLOW

    @property
    def starved(self) -> bool:
        """Return True when ours was slow on the clock only: it waited."""
        return self.involves_us and not self.ours

    @property
    def gc_made(self) -> bool:
        """Return True when a garbage collection took most of the callback."""
        return self.gc_seconds >= self.seconds / 2


@dataclass(slots=True)
class _Running:
    started: float
    cpu: float
    sampled: list[tuple[list[str], str]] = field(default_factory=list)


class SlowCallbacks:
    """Time every callback of the loop in this thread; name the slow ones."""

    def __init__(self) -> None:
        """Prepare; :meth:`install` starts watching."""
        self.slow: list[SlowCallback] = []
        self.callbacks = 0
        self._running: _Running | None = None
        self._thread_id = threading.get_ident()
        self._stop = threading.Event()
        self._watchdog: threading.Thread | None = None
        self._original: Any = None
        self._gc_started = 0.0
        self._gc_seconds = 0.0

    def install(self) -> None:
        """Start timing callbacks run by loops in this thread."""
        # Every callback of a loop, and each step of a task, is a Handle run.
        original = self._original = asyncio.events.Handle._run  # noqa: SLF001
        monitor = self

        def timed_run(handle: asyncio.Handle) -> None:
            if threading.get_ident() != monitor._thread_id:
                original(handle)
                return
            running = monitor._running = _Running(
                time.perf_counter(), time.thread_time()
            )
            gc_before = monitor._gc_seconds
            try:
                original(handle)
            finally:
                monitor._running = None
                monitor.callbacks += 1
                took = time.perf_counter() - running.started
                if took > SLOW:
                    monitor._record(
                        handle,
                        running,
                        (took, time.thread_time() - running.cpu),
                        monitor._gc_seconds - gc_before,
                    )

        asyncio.events.Handle._run = timed_run  # type: ignore[method-assign]  # noqa: SLF001
        gc.callbacks.append(self._on_gc)
        self._watchdog = threading.Thread(
            target=self._watch, name="slow-callback watchdog", daemon=True
        )
        self._watchdog.start()

    def uninstall(self) -> None:
        """Stop timing."""
        if self._original is not None:
            asyncio.events.Handle._run = self._original  # type: ignore[method-assign]  # noqa: SLF001
            self._original = None
        if self._on_gc in gc.callbacks:
            gc.callbacks.remove(self._on_gc)
        self._stop.set()
        if self._watchdog is not None:
            self._watchdog.join()

    def _on_gc(self, phase: str, _info: dict[str, int]) -> None:
        if phase == "start":
            self._gc_started = time.perf_counter()
        else:
            self._gc_seconds += time.perf_counter() - self._gc_started

    def _watch(self) -> None:
        """Look at the loop thread's stack while a callback runs long."""
        while not self._stop.wait(SAMPLE_EVERY):
            running = self._running
            if running is None or time.perf_counter() - running.started < SLOW / 2:
                continue
            frame = sys._current_frames().get(self._thread_id)  # noqa: SLF001
            if frame is not None and self._running is running:
                running.sampled.append(_frames(frame))

    def _record(
        self,
        handle: asyncio.Handle,
        running: _Running,
        took: tuple[float, float],
        gc_took: float,
    ) -> None:
        where: list[str] = []
        for ours, _top in running.sampled:
            where += [frame for frame in ours if frame not in where]
        top = running.sampled[-1][1] if running.sampled else ""
        what, code = _describe(handle)
        owned = code is not None and OURS in code
        wall, cpu = took
        self.slow.append(SlowCallback(wall, cpu, gc_took, what, where, top, owned))

    def summary(self) -> dict[str, Any]:
        """Return the counts, ours apart, and ours by name."""
        return {
            "callbacks": self.callbacks,
            "slow": len(self.slow),
            "ours": sum(1 for slow in self.slow if slow.ours),
            "ours_starved": sum(1 for slow in self.slow if slow.starved),
            "gc": sum(1 for slow in self.slow if slow.gc_made),
            "others": [
                {"what": slow.what, "at": slow.top, "ms": round(slow.seconds * 1000)}
                for slow in sorted(self.slow, key=lambda s: -s.seconds)
                if not slow.involves_us and not slow.gc_made
            ][:5],
            "named": _named([slow for slow in self.slow if slow.involves_us]),
        }


def _named(slows: list[SlowCallback]) -> list[dict[str, Any]]:
    """Return slow callbacks grouped by what and where, the longest of each."""
    named: Counter[str] = Counter()
    worst: dict[str, SlowCallback] = {}
    for slow in slows:
        name = f"{slow.what} at {slow.where[0] if slow.where else slow.top}"
        named[name] += 1
        if name not in worst or slow.seconds > worst[name].seconds:
            worst[name] = slow
    return [
        {
            "what": name,
            "count": count,
            "max_ms": round(worst[name].seconds * 1000),
            "its_cpu_ms": round(worst[name].cpu_seconds * 1000),
            "ran_long": worst[name].ours,
        }
        for name, count in named.most_common(10)
    ]


def _frames(frame: FrameType | None) -> tuple[list[str], str]:
    """Return the integration's frames on a stack (innermost first), and its top."""
    ours: list[str] = []
    top = _place(frame) if frame is not None else ""
    while frame is not None:
        if OURS in frame.f_code.co_filename:
            ours.append(_place(frame))
        frame = frame.f_back
    return ours, top


def _place(frame: FrameType) -> str:
    path = frame.f_code.co_filename
    if path.startswith(ROOT):
        path = path[len(ROOT) :]
    elif "site-packages" + os.sep in path:
        path = path.split("site-packages" + os.sep, 1)[1]
    return f"{path}:{frame.f_lineno} {frame.f_code.co_qualname}"


def _describe(handle: asyncio.Handle) -> tuple[str, str | None]:
    """Return the task's coroutine or the callback's name, and its file."""
    callback = getattr(handle, "_callback", None)
    task = getattr(callback, "__self__", None)
    if isinstance(task, asyncio.Task):
        coro = task.get_coro()
        name = getattr(coro, "__qualname__", None) or repr(coro)
        code = getattr(coro, "cr_code", None)
        return f"task {task.get_name()} ({name})", getattr(code, "co_filename", None)
    function = getattr(callback, "__func__", callback)
    code = getattr(function, "__code__", None)
    name = getattr(callback, "__qualname__", None) or repr(callback)
    return name, getattr(code, "co_filename", None)
