"""Whether the router's core parts still run: what /healthz answers and what ends the process.

A core part (the session manager's task group, the recorder's writer) that stops for good calls
``fail(component, reason)``. From then on /healthz answers 503 with the reasons, and ``serve``
shuts uvicorn down and exits non-zero, so that systemd restarts a process that can no longer do
its job instead of leaving one that answers every client with an error.
"""

from __future__ import annotations

import logging
import threading
from collections.abc import Callable

__all__ = ["FailureListener", "Health"]

log = logging.getLogger(__name__)

FailureListener = Callable[[str, str], None]


class Health:
    """Thread-safe: ``fail`` may be called from the loop or from a worker thread."""

    def __init__(self) -> None:
        self._lock = threading.Lock()
        self._failures: dict[str, str] = {}
        self._listeners: list[FailureListener] = []

    def fail(self, component: str, reason: str) -> None:
        """``component`` stopped for good. The first reason per component is kept; each listener
        hears about each component once."""
        with self._lock:
            if component in self._failures:
                return
            self._failures[component] = reason
            listeners = list(self._listeners)
        log.critical("%s failed: %s; the router must be restarted", component, reason)
        for listener in listeners:
            try:
                listener(component, reason)
            except Exception:
                log.exception("health: a failure listener raised")

    def on_failure(self, listener: FailureListener) -> None:
        """``listener(component, reason)`` on every later failure, and at once for past ones."""
        with self._lock:
            self._listeners.append(listener)
            past = list(self._failures.items())
        for component, reason in past:
            listener(component, reason)

    def reporter(self, component: str) -> Callable[[str], None]:
        """``fail`` bound to one component, for a part that takes a ``reason`` callback."""
        return lambda reason: self.fail(component, reason)

    @property
    def ok(self) -> bool:
        with self._lock:
            return not self._failures

    @property
    def failures(self) -> dict[str, str]:
        with self._lock:
            return dict(self._failures)
