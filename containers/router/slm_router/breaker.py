"""A per-upstream circuit breaker: stop sending to an upstream that keeps failing, probe it again later."""

from __future__ import annotations

import time
from collections.abc import Callable


class CircuitBreaker:
    """closed → (failure_threshold consecutive failures) → open → (reset_after_s) → half-open: one trial
    request; its success closes the circuit, its failure opens it for another reset_after_s."""

    def __init__(
        self,
        name: str,
        failure_threshold: int,
        reset_after_s: float,
        *,
        clock: Callable[[], float] = time.monotonic,
        on_change: Callable[[str, str], None] | None = None,
    ):
        self.name = name
        self.failure_threshold = failure_threshold
        self.reset_after_s = reset_after_s
        self.clock = clock
        self.on_change = on_change or (lambda name, state: None)
        self.failures = 0
        self.opened_at: float | None = None
        self.trial_at: float | None = None  # when the half-open trial was let through

    @property
    def state(self) -> str:
        if self.opened_at is None:
            return "closed"
        if self.clock() - self.opened_at < self.reset_after_s:
            return "open"
        return "half_open"

    def allow(self) -> bool:
        state = self.state
        if state == "closed":
            return True
        if state == "open":
            return False
        now = self.clock()
        # One trial at a time; a trial that never reported back (cancelled) stops blocking after reset_after_s.
        if self.trial_at is None or now - self.trial_at >= self.reset_after_s:
            self.trial_at = now
            return True
        return False

    def success(self) -> None:
        was_open = self.opened_at is not None
        self.failures = 0
        self.opened_at = self.trial_at = None
        if was_open:
            self.on_change(self.name, "closed")

    def failure(self) -> None:
        self.failures += 1
        if self.opened_at is not None or self.failures >= self.failure_threshold:
            self.opened_at = self.clock()
            self.trial_at = None
            self.on_change(self.name, "open")
