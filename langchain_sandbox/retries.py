"""Retrying operations that are safe to repeat.

Only idempotent operations go through here (create, attach, reads, snapshot, restore, close), and
only errors whose ``retryable`` flag is set are retried: running user code is never repeated
silently. Backoff is jittered and exponential, bounded by the caller's deadline.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    wait_random_exponential,
)

from langchain_sandbox.errors import is_retryable

T = TypeVar("T")

DEFAULT_ATTEMPTS = 4
DEFAULT_DEADLINE = 60.0


async def retry_async(
    operation: Callable[[], Awaitable[T]],
    *,
    attempts: int = DEFAULT_ATTEMPTS,
    deadline: float | None = DEFAULT_DEADLINE,
    initial_wait: float = 0.2,
    max_wait: float = 5.0,
) -> T:
    """Await ``operation()`` again while it raises a retryable ``SandboxError``.

    Args:
        operation: A zero-argument coroutine factory; it must be safe to run more than once.
        attempts: Total tries, the first included.
        deadline: Seconds after which no new attempt starts (``None``: no deadline).
        initial_wait: Scale of the first backoff; later ones grow exponentially, with jitter.
        max_wait: Longest single backoff.
    """
    stop: Any = stop_after_attempt(attempts)
    if deadline is not None:
        stop = stop | stop_after_delay(max(deadline, 0.0))
    retrying = AsyncRetrying(
        stop=stop,
        wait=wait_random_exponential(multiplier=initial_wait, max=max_wait),
        retry=retry_if_exception(is_retryable),
        reraise=True,
    )
    async for attempt in retrying:
        with attempt:
            return await operation()
    raise AssertionError("unreachable: tenacity re-raises the last error")  # pragma: no cover


__all__ = ["DEFAULT_ATTEMPTS", "DEFAULT_DEADLINE", "retry_async"]
