"""A provider at an address where nothing listens: one typed error, after two tries, and no
traceback on the way (an unreachable Runloop used to log one per cleanup attempt)."""

from __future__ import annotations

import logging
import socket

import pytest

from langchain_sandbox import E2BProvider, ProviderUnreachableError, RunloopProvider


def _closed_port() -> str:
    """A loopback address nothing listens on (bound, then released)."""
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    return f"http://127.0.0.1:{port}"


async def test_an_unreachable_runloop_fails_once_typed_and_quietly(
    caplog: pytest.LogCaptureFixture, monkeypatch: pytest.MonkeyPatch
) -> None:
    pytest.importorskip("runloop_api_client")
    url = _closed_port()
    provider = RunloopProvider(api_key="rl_test_key", base_url=url, retry_attempts=6)
    calls: list[str] = []
    devboxes = provider.sdk().api.devboxes
    for name in ("create_and_await_running", "list"):
        real = getattr(devboxes, name)

        async def counting(
            *args: object, _real: object = real, _name: str = name, **kw: object
        ) -> object:
            calls.append(_name)
            return await _real(*args, **kw)  # type: ignore[operator]

        monkeypatch.setattr(devboxes, name, counting)
    caplog.set_level(logging.DEBUG, logger="langchain_sandbox")
    try:
        with pytest.raises(ProviderUnreachableError, match="Runloop could not be reached"):
            await provider.create()
    finally:
        await provider.aclose()
    # Two creation tries; no cleanup listing, since the request never left.
    assert calls == ["create_and_await_running", "create_and_await_running"]
    assert not [r for r in caplog.records if r.levelno >= logging.WARNING]


async def test_an_unreachable_e2b_fails_typed_after_two_tries() -> None:
    pytest.importorskip("e2b_code_interpreter")
    url = _closed_port()
    provider = E2BProvider(api_key="e2b_test_key", api_url=url, sandbox_url=url, retry_attempts=6)
    try:
        with pytest.raises(ProviderUnreachableError) as caught:
            await provider.create()
    finally:
        await provider.aclose()
    assert caught.value.details["sdk_error"] == "ConnectError"
