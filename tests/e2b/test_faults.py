"""Faults injected at the emulator: typed errors, retries only where safe, gone sandboxes."""

from __future__ import annotations

import asyncio
import threading

import pytest

from langchain_sandbox.errors import (
    AuthenticationError,
    ProviderUnavailableError,
    QuotaExceededError,
    SandboxGoneError,
)
from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator


def _provider(emulator: E2BEmulator, **options: object) -> E2BProvider:
    return E2BProvider(
        api_key=emulator.api_key, api_url=emulator.url, sandbox_url=emulator.url, **options
    )


@pytest.mark.parametrize("route", ["jupyter execute", "envd Start"])
@pytest.mark.parametrize("fault", [{"status": 503, "should_retry": None}, {"drop": True}])
async def test_running_code_is_never_repeated(
    provider: E2BProvider, emulator: E2BEmulator, route: str, fault: dict[str, object]
) -> None:
    async with await provider.create() as session:
        await session.run_code("runs = 0")
        emulator.clear_requests()
        emulator.inject(route, **fault)  # type: ignore[arg-type]
        run = session.run_code if route == "jupyter execute" else session.run_command
        with pytest.raises(ProviderUnavailableError) as raised:
            await run("runs += 1" if route == "jupyter execute" else "echo once")
        assert raised.value.retryable  # the caller may decide; the provider did not
        # One request reached the server: neither the SDK nor the provider sent it again.
        assert emulator.count(route) == 1
        assert (await session.run_code("runs")).value == "0"  # the session is still usable


async def test_the_sdk_does_not_retry_control_plane_calls_behind_our_back(
    emulator: E2BEmulator,
) -> None:
    provider = _provider(emulator, retry_attempts=1, lease_seconds=60)
    async with await provider.create() as session:
        # 503 without Should-Retry is one the SDK would retry 3 times by default.
        emulator.inject("/timeout$", status=503, should_retry=None)
        with pytest.raises(ProviderUnavailableError):
            await session.run_command("true", timeout=100)  # needs a lease extension
        assert emulator.count("/timeout$") == 1


async def test_create_is_retried_on_quota_and_makes_one_sandbox(emulator: E2BEmulator) -> None:
    provider = _provider(emulator, retry_attempts=4)
    emulator.inject(r"^POST /v2/sandboxes$", status=429, times=2)
    async with await provider.create() as session:
        assert (await session.run_code("1 + 1")).value == "2"
        assert emulator.count(r"^POST /v2/sandboxes$") == 3
        assert emulator.sandbox_ids() == [session.record["sandbox_id"]]


async def test_a_lost_create_response_is_retried_with_the_same_idempotency_key(
    emulator: E2BEmulator,
) -> None:
    provider = _provider(emulator)
    emulator.inject(r"^POST /v2/sandboxes$", lose_response=True)
    async with await provider.create() as session:
        creates = [r for r in emulator.requests if r.route == "POST /v2/sandboxes"]
        assert len(creates) == 2
        assert creates[0].headers["idempotency-key"] == creates[1].headers["idempotency-key"]
        # The server acted on the first request; the retry got the same sandbox back.
        assert emulator.sandbox_ids() == [session.record["sandbox_id"]]


async def test_persistent_quota_errors_surface_typed_after_bounded_attempts(
    emulator: E2BEmulator,
) -> None:
    provider = _provider(emulator, retry_attempts=3)
    emulator.inject(r"^POST /v2/sandboxes$", status=429, times=None)
    with pytest.raises(QuotaExceededError) as raised:
        await provider.create()
    assert raised.value.retryable
    assert raised.value.details["status"] == 429
    assert emulator.count(r"^POST /v2/sandboxes$") == 3
    assert emulator.sandbox_ids() == []


async def test_bad_credentials_are_not_retried(emulator: E2BEmulator) -> None:
    provider = E2BProvider(
        api_key="e2b_wrong_key_SECRETVALUE", api_url=emulator.url, sandbox_url=emulator.url
    )
    with pytest.raises(AuthenticationError) as raised:
        await provider.create()
    assert not raised.value.retryable
    assert "SECRETVALUE" not in str(raised.value)
    assert emulator.count(r"^POST /v2/sandboxes$") == 1


async def test_reads_and_listing_are_retried_on_5xx(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        await session.write_files({"a.txt": b"A"})
        emulator.inject("envd GET /files", status=502, times=1)
        emulator.inject("envd ListDir", status=503, times=1)
        emulator.inject("GET /v2/sandboxes", status=500, times=1)
        assert await session.read_files(["a.txt"]) == {"a.txt": b"A"}
        assert [f.path for f in await session.list_files() if f.path[0] != "."] == ["a.txt"]
        assert len(await provider.list_sessions()) == 1
        assert emulator.count("envd GET /files") == 2
        assert emulator.count("envd ListDir") == 2


async def test_an_expired_sandbox_is_gone_everywhere(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    session = await provider.create()
    await session.run_code("x = 1")
    sandbox_id = session.record["sandbox_id"]
    emulator.advance_clock(emulator.lease_remaining(sandbox_id) + 1)  # its timeout passed
    assert emulator.sandbox_ids() == []
    for call in (
        lambda: session.run_code("x"),
        lambda: session.run_command("true"),
        lambda: session.read_files(["a.txt"]),
        lambda: session.write_files({"a.txt": b"1"}),
        lambda: session.list_files(),
    ):
        with pytest.raises(SandboxGoneError):
            await call()
    assert not await session.is_alive()
    assert await provider.attach(session.record) is None
    await session.close()  # closing what is gone is fine


async def test_a_sandbox_killed_mid_execution_is_reported_gone(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    session = await provider.create()
    await session.run_code("import time")
    sandbox_id = session.record["sandbox_id"]
    started = threading.Event()

    def kill_when_running() -> None:
        started.wait(30)
        emulator.expire(sandbox_id)

    killer = threading.Thread(target=kill_when_running)
    killer.start()
    task = asyncio.create_task(
        session.run_code(
            "print('running', flush=True)\ntime.sleep(30)", on_output=lambda *_: started.set()
        )
    )
    with pytest.raises(SandboxGoneError):
        await asyncio.wait_for(task, 60)
    killer.join()
    await session.close()


async def test_an_unreachable_provider_is_unavailable(emulator: E2BEmulator) -> None:
    provider = _provider(emulator, retry_attempts=2, retry_deadline=5)
    emulator.close()
    with pytest.raises(ProviderUnavailableError):
        await provider.create()


async def test_a_slow_create_times_out_and_its_retry_makes_no_second_sandbox(
    emulator: E2BEmulator,
) -> None:
    provider = _provider(emulator, request_timeout=1.0)
    emulator.inject(r"^POST /v2/sandboxes$", delay=3.0)  # answered after the client gave up
    async with await provider.create() as session:
        # The first create timed out and was retried; on a loaded machine a retry can time out
        # too (the emulator starts a real sandbox per create). However many tries it took, one
        # sandbox is left: that is what this test is about.
        assert emulator.count(r"^POST /v2/sandboxes$") >= 2
        for _ in range(100):  # the slow first request completes on the server later
            if all(r.status for r in emulator.requests if r.route == "POST /v2/sandboxes"):
                break
            await asyncio.sleep(0.05)
        assert emulator.sandbox_ids() == [session.record["sandbox_id"]]
