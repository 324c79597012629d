"""Only retryable errors are retried, and never past the attempt budget."""

from __future__ import annotations

import pytest

from langchain_sandbox.core.retries import retry_async
from langchain_sandbox.errors import (
    AuthenticationError,
    ProviderUnavailableError,
    SandboxError,
    is_retryable,
)


async def test_retryable_errors_are_retried_until_success() -> None:
    calls = 0

    async def flaky() -> str:
        nonlocal calls
        calls += 1
        if calls < 3:
            raise ProviderUnavailableError("503")
        return "ok"

    assert await retry_async(flaky, initial_wait=0.001, max_wait=0.001) == "ok"
    assert calls == 3


async def test_permanent_errors_are_not_retried() -> None:
    calls = 0

    async def denied() -> None:
        nonlocal calls
        calls += 1
        raise AuthenticationError("401")

    with pytest.raises(AuthenticationError):
        await retry_async(denied, initial_wait=0.001)
    assert calls == 1


async def test_attempts_are_bounded_and_last_error_is_raised() -> None:
    calls = 0

    async def down() -> None:
        nonlocal calls
        calls += 1
        raise ProviderUnavailableError(f"down {calls}")

    with pytest.raises(ProviderUnavailableError, match="down 3"):
        await retry_async(down, attempts=3, initial_wait=0.001, max_wait=0.001)
    assert calls == 3


def test_retryable_flag_can_be_overridden_per_instance() -> None:
    assert is_retryable(ProviderUnavailableError("x"))
    assert not is_retryable(ProviderUnavailableError("x", retryable=False))
    assert is_retryable(SandboxError("x", retryable=True))
    assert not is_retryable(ValueError("x"))


async def test_a_provider_that_never_answers_is_tried_twice() -> None:
    from langchain_sandbox.core.retries import UNREACHABLE_ATTEMPTS
    from langchain_sandbox.errors import ProviderUnreachableError

    calls = 0

    async def refused() -> None:
        nonlocal calls
        calls += 1
        raise ProviderUnreachableError(f"refused {calls}")

    with pytest.raises(ProviderUnreachableError, match="refused 2"):
        await retry_async(refused, attempts=6, initial_wait=0.001, max_wait=0.001)
    assert calls == UNREACHABLE_ATTEMPTS == 2
