"""Retrying operations that are safe to repeat.

Only idempotent operations go through here (create, attach, reads, snapshot, restore, close), and
only errors whose ``retryable`` flag is set are retried: running user code is never repeated
silently. Backoff is jittered and exponential, bounded by the caller's deadline.

The budget: ``attempts`` tries (default `DEFAULT_ATTEMPTS`) that start within ``deadline``
seconds (default `DEFAULT_DEADLINE`; each provider has its own ``retry_attempts`` and
``retry_deadline``), except for a provider that does not answer at all
([`ProviderUnreachableError`][langchain_sandbox.ProviderUnreachableError]: connection refused, no route),
which is tried `UNREACHABLE_ATTEMPTS` times: a wrong address fails in seconds, with one
typed error, instead of after the whole budget.
"""

from __future__ import annotations

from collections.abc import Awaitable, Callable
from typing import Any, TypeVar

from tenacity import (
    AsyncRetrying,
    RetryCallState,
    retry_if_exception,
    stop_after_attempt,
    stop_after_delay,
    stop_any,
    wait_random_exponential,
)
from tenacity.stop import stop_base

from langchain_sandbox.errors import ProviderUnreachableError, is_retryable

T = TypeVar("T")

DEFAULT_ATTEMPTS = 4
DEFAULT_DEADLINE = 60.0
UNREACHABLE_ATTEMPTS = 2
"""Tries, the first included, of an operation whose provider does not answer at all."""


class _StopUnreachable(stop_base):
    """Stop once a provider that does not answer at all has had its tries."""

    def __call__(self, retry_state: RetryCallState) -> bool:
        outcome = retry_state.outcome
        return (
            outcome is not None
            and outcome.failed
            and isinstance(outcome.exception(), ProviderUnreachableError)
            and retry_state.attempt_number >= UNREACHABLE_ATTEMPTS
        )


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
    stop: Any = stop_any(stop_after_attempt(attempts), _StopUnreachable())
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


__all__ = ["DEFAULT_ATTEMPTS", "DEFAULT_DEADLINE", "UNREACHABLE_ATTEMPTS", "retry_async"]
