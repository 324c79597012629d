"""The emulator speaks Runloop's API as the real SDK uses it (async and sync), checked through the
SDK itself and against the SDK's own response models."""

from __future__ import annotations

import asyncio
import json
import threading
from typing import Any

import pytest
from runloop_api_client import (
    APIConnectionError,
    AsyncRunloopSDK,
    AuthenticationError,
    InternalServerError,
    NotFoundError,
    RateLimitError,
    RunloopSDK,
)
from runloop_api_client.types import DevboxAsyncExecutionDetailView, DevboxView
from runloop_api_client.types.devbox_snapshot_view import DevboxSnapshotView
from runloop_api_client.types.devboxes import DevboxSnapshotAsyncStatusView

from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

from .keys import FAKE_KEY


def _sdk(emulator: RunloopEmulator, **options: Any) -> AsyncRunloopSDK:
    return AsyncRunloopSDK(bearer_token=FAKE_KEY, base_url=emulator.url, **options)


async def test_async_sdk_devbox_commands_and_files(emulator: RunloopEmulator) -> None:
    async with _sdk(emulator) as sdk:
        devbox = await sdk.devbox.create(name="probe", metadata={"owner": "tests"})
        result = await devbox.cmd.exec("echo hi; echo oops >&2; exit 3")
        assert result.exit_code == 3
        assert await result.stdout() == "hi\n"
        assert await result.stderr() == "oops\n"

        await devbox.file.write(file_path="notes/a.txt", contents="héllo")
        assert await devbox.file.read(file_path="/home/user/notes/a.txt") == "héllo"
        blob = bytes(range(256)) * 4
        await devbox.file.upload(path="/home/user/blob.bin", file=("blob.bin", blob))
        assert await devbox.file.download(path="blob.bin") == blob
        seen = await devbox.cmd.exec("wc -c < /home/user/blob.bin; cat notes/a.txt")
        assert await seen.stdout() == "1024\nhéllo"

        listed = [d.id for d in await sdk.devbox.list(limit=10)]
        assert devbox.id in listed
        info = await devbox.get_info()
        assert (info.status, info.name, info.metadata) == ("running", "probe", {"owner": "tests"})
        await devbox.shutdown()
        assert (await devbox.get_info()).status == "shutdown"


async def test_commands_share_the_devbox_like_a_machine(emulator: RunloopEmulator) -> None:
    async with _sdk(emulator) as sdk:
        devbox = await sdk.devbox.create()
        # A service outlives its command when it has its own session (the local sandbox under
        # the emulator ends a command's process group with the command); Popen returns only once
        # the child has its session, so the command cannot end first.
        service = "import subprocess; print(subprocess.Popen(['sleep', '60'], start_new_session=True).pid)"
        await devbox.cmd.exec(f'echo kept > /tmp/flag; python3 -c "{service}" > /tmp/pid')
        again = await devbox.cmd.exec("cat /tmp/flag; kill -0 $(cat /tmp/pid) && echo alive")
        assert await again.stdout() == "kept\nalive\n"
        await devbox.shutdown()


async def test_long_output_is_truncated_inline_and_complete_over_sse(
    emulator: RunloopEmulator,
) -> None:
    async with _sdk(emulator) as sdk:
        devbox = await sdk.devbox.create()
        result = await devbox.cmd.exec("seq 1 5000")
        assert result.result.stdout_truncated is True
        assert (result.result.stdout or "").count("\n") == 100
        full = await result.stdout()
        assert full == "".join(f"{i}\n" for i in range(1, 5001))
        assert emulator.count("/stream_stdout_updates$", method="GET") == 1
        await devbox.shutdown()


async def test_long_polls_answer_408_and_the_sdk_polls_again(emulator: RunloopEmulator) -> None:
    emulator.max_hold = 0.2
    async with _sdk(emulator) as sdk:
        devbox = await sdk.devbox.create()
        emulator.clear_requests()
        result = await devbox.cmd.exec("sleep 1.5; echo done")
        assert await result.stdout() == "done\n"
        waits = [r for r in emulator.requests if r.path.endswith("/wait_for_status")]
        assert [r.status for r in waits].count(408) >= 2
        assert waits[-1].status == 200
        assert emulator.count("/execute_async$") == 1
        await devbox.shutdown()


async def test_booting_devbox_is_awaited_through_wait_for_status() -> None:
    async with RunloopEmulator(api_key=FAKE_KEY, boot_delay=1.5) as emulator, _sdk(emulator) as sdk:
        devbox = await sdk.devbox.create()
        assert (await devbox.get_info()).status == "running"
        devbox_waits = [
            r for r in emulator.requests if r.path == f"/v1/devboxes/{devbox.id}/wait_for_status"
        ]
        assert devbox_waits
        assert devbox_waits[0].json()["statuses"] == ["running", "failure", "shutdown"]
        await devbox.shutdown()


async def test_snapshot_suspend_resume_with_the_async_sdk(emulator: RunloopEmulator) -> None:
    async with _sdk(emulator) as sdk:
        devbox = await sdk.devbox.create()
        await devbox.file.write(file_path="state.txt", contents="v1")
        snapshot = await devbox.snapshot_disk(name="first")
        status = await snapshot.get_info()
        assert status.status == "complete"
        assert status.snapshot is not None
        assert status.snapshot.source_devbox_id == devbox.id

        await devbox.suspend()
        suspended = await devbox.await_suspended()
        assert suspended.status == "suspended"
        resumed = await devbox.resume()
        assert resumed.status == "running"
        assert await devbox.file.read(file_path="state.txt") == "v1"

        copy = await sdk.devbox.create_from_snapshot(snapshot.id)
        assert await copy.file.read(file_path="state.txt") == "v1"
        for box in (devbox, copy):
            await box.shutdown()


def test_sync_sdk_flow() -> None:
    with RunloopEmulator(api_key=FAKE_KEY) as emulator:
        sdk = RunloopSDK(bearer_token=FAKE_KEY, base_url=emulator.url)
        try:
            devbox = sdk.devbox.create()
            result = devbox.cmd.exec("printf 'a\\nb\\n'")
            assert (result.exit_code, result.stdout()) == (0, "a\nb\n")
            devbox.file.write(file_path="x.txt", contents="sync")
            assert devbox.file.read(file_path="x.txt") == "sync"
            devbox.suspend()
            assert devbox.get_info().status == "suspended"
            devbox.resume()
            assert devbox.file.read(file_path="x.txt") == "sync"
            execution = devbox.cmd.exec_async("sleep 30")
            execution.kill()
            assert execution.result().exit_code is not None
            devbox.shutdown()
        finally:
            sdk.close()


async def test_faults_reach_the_sdk_as_its_own_errors(emulator: RunloopEmulator) -> None:
    async with _sdk(emulator) as sdk:
        devbox = await sdk.devbox.create()
        fault = emulator.inject("/execute_async$", status=429)
        with pytest.raises(RateLimitError):
            await devbox.cmd.exec("echo never")
        assert fault.hits == 1
        assert emulator.count("/execute_async$") == 1
        emulator.inject(r"/v1/devboxes/[^/]+$", method="GET", drop=True)
        async with _sdk(emulator, max_retries=0) as no_retry:
            with pytest.raises(APIConnectionError):
                await no_retry.devbox.from_id(devbox.id).get_info()
        emulator.expire(devbox.id, forget=True)
        with pytest.raises(NotFoundError):
            await devbox.get_info()

    async with AsyncRunloopSDK(bearer_token="wrong", base_url=emulator.url) as wrong:
        with pytest.raises(AuthenticationError):
            await wrong.devbox.list()


async def test_responses_validate_against_the_sdk_models(emulator: RunloopEmulator) -> None:
    """Every JSON body the provider relies on parses strictly with the SDK's pydantic models."""
    async with _sdk(emulator) as sdk:
        api = sdk.api
        raw = await api.devboxes.with_raw_response.create(metadata={"k": "v"})
        view = json.loads(await raw.text())
        DevboxView.model_validate(view)
        await sdk.devbox.from_id(view["id"]).await_running()
        got = await api.devboxes.with_raw_response.retrieve(view["id"])
        DevboxView.model_validate(json.loads(await got.text()))
        started = await api.devboxes.with_raw_response.execute_async(view["id"], command="echo x")
        execution = json.loads(await started.text())
        DevboxAsyncExecutionDetailView.model_validate(execution)
        waited = await api.devboxes.with_raw_response.wait_for_command(
            execution["execution_id"], devbox_id=view["id"], statuses=["completed"]
        )
        done = DevboxAsyncExecutionDetailView.model_validate(json.loads(await waited.text()))
        assert (done.status, done.exit_status, done.stdout) == ("completed", 0, "x\n")
        snap = await api.devboxes.with_raw_response.snapshot_disk_async(view["id"], name="s")
        snapshot = DevboxSnapshotView.model_validate(json.loads(await snap.text()))
        await sdk.snapshot.from_id(snapshot.id).await_completed()
        status = await api.devboxes.disk_snapshots.with_raw_response.query_status(snapshot.id)
        DevboxSnapshotAsyncStatusView.model_validate(json.loads(await status.text()))
        listing = await api.devboxes.with_raw_response.list()
        for item in json.loads(await listing.text())["devboxes"]:
            DevboxView.model_validate(item)
        down = await api.devboxes.with_raw_response.shutdown(view["id"])
        assert DevboxView.model_validate(json.loads(await down.text())).status == "shutdown"


async def test_request_log_never_keeps_the_api_key(emulator: RunloopEmulator) -> None:
    async with _sdk(emulator) as sdk:
        await sdk.devbox.list()
    assert emulator.requests
    for request in emulator.requests:
        assert "authorization" not in request.headers
        assert FAKE_KEY not in json.dumps(request.headers)


async def test_several_devboxes_run_at_once_and_apart() -> None:
    emulator = RunloopEmulator(api_key=FAKE_KEY)
    async with emulator, _sdk(emulator) as sdk:
        boxes = await asyncio.gather(*(sdk.devbox.create() for _ in range(3)))
        await asyncio.gather(
            *(box.file.write(file_path="who.txt", contents=box.id) for box in boxes)
        )
        results = await asyncio.gather(
            *(box.cmd.exec("sleep 1; cat who.txt; ls /home/user") for box in boxes)
        )
        for box, result in zip(boxes, results, strict=True):
            assert await result.stdout() == f"{box.id}who.txt\n"
    # Closing shut every devbox down and joined the emulator's threads.
    assert {d.status for d in emulator.account.listing()} == {"shutdown"}
    assert not [t for t in threading.enumerate() if t.name.startswith("runloop-emulator")]


async def test_a_failure_of_the_emulator_itself_is_a_500_that_names_it(
    emulator: RunloopEmulator, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """An error of the emulator's own (a devbox's machine failing to start with an
    ``OSError``) answers 500 with its message and prints its traceback, rather than closing the
    connection with no answer."""

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(emulator.account, "create", broken)
    async with _sdk(emulator, max_retries=0) as sdk:
        with pytest.raises(InternalServerError, match="No space left on device"):
            await sdk.devbox.create(name="probe")
    assert "OSError" in capfd.readouterr().err
    assert [r.status for r in emulator.requests] == [500]
