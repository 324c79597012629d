"""RunloopProvider through the real async SDK against the emulator: requests per call, retries that
never repeat user code, typed errors, gone devboxes, persistence, secrets."""

from __future__ import annotations

import asyncio
import base64
import json
import logging
import subprocess
import sys

import pytest

from langchain_sandbox.errors import (
    AuthenticationError,
    InvalidInputError,
    InvalidPathError,
    ProviderUnavailableError,
    QuotaExceededError,
    SandboxError,
    SandboxGoneError,
    SessionClosedError,
)
from langchain_sandbox.providers import get_provider
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.runloop import (
    SESSION_KEY,
    TAG_KEY,
    WORKER_DIR,
    RunloopProvider,
)
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

from .keys import FAKE_KEY


def _executions(emulator: RunloopEmulator) -> list[str]:
    return [r.json()["command"] for r in emulator.requests if r.path.endswith("/execute_async")]


async def test_a_warm_execution_is_two_requests(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        await session.run_code("x = 1")
        emulator.clear_requests()
        result = await session.run_code("x + 41")
        assert result.value == "42"
        assert [r.path.rsplit("/", 1)[-1] for r in emulator.requests] == [
            "execute_async",
            "wait_for_status",
        ]
        emulator.clear_requests()
        command = await session.run_command("echo $((6 * 7))")
        assert command.stdout == "42\n"
        assert len(emulator.requests) == 2


async def test_create_tags_the_devbox_and_passes_the_image_options(
    emulator: RunloopEmulator,
) -> None:
    provider = emulator.provider(
        blueprint_name="python-3.11", launch_parameters={"keep_alive_time_seconds": 600}
    )
    spec = SessionSpec(env={"GREETING": "hey"}, metadata={"thread_id": "t-1"})
    async with await provider.create(spec) as session:
        create = next(r for r in emulator.requests if r.path.endswith("/create_and_await_running"))
        body = create.json()
        assert body["blueprint_name"] == "python-3.11"
        assert body["launch_parameters"] == {"keep_alive_time_seconds": 600}
        assert body["environment_variables"] == {"GREETING": "hey"}
        assert body["metadata"] == {
            "thread_id": "t-1",
            TAG_KEY: "1",
            SESSION_KEY: session.session_id,
        }
        assert (await session.run_command("echo $GREETING")).stdout == "hey\n"
        assert (await session.run_code("import os\nos.environ['GREETING']")).value == "'hey'"
    emulator.clear_requests()
    with pytest.raises(SandboxError, match="snp_missing"):
        await provider.create(SessionSpec(template="snapshot:snp_missing"))
    create = next(r for r in emulator.requests if r.path.endswith("/create_and_await_running"))
    assert create.json()["snapshot_id"] == "snp_missing"
    assert "blueprint_name" not in create.json()


async def test_503_on_execute_is_one_error_and_one_execution(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        await session.run_command("true")
        emulator.clear_requests()
        emulator.inject("/execute_async$", status=503)
        with pytest.raises(ProviderUnavailableError) as caught:
            await session.run_code("counter = 1")
        assert caught.value.retryable
        assert emulator.count("/execute_async$") == 1
        again = await session.run_code("print('usable')")
        assert again.stdout == "usable\n"


async def test_a_dropped_long_poll_is_retried_without_running_the_code_again(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        await session.run_code("runs = 0")
        emulator.clear_requests()
        emulator.inject("/executions/[^/]+/wait_for_status$", drop=True)
        result = await session.run_code("runs += 1\nruns")
        assert result.value == "1"
        assert emulator.count("/execute_async$") == 1
        assert emulator.count("/wait_for_status$") == 2


async def test_an_answer_too_long_to_be_inline_is_read_over_sse(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    emulator.inline_output_bytes = 200
    async with await provider.create() as session:
        emulator.clear_requests()
        result = await session.run_code("print('x' * 5000)\n'done'")
        assert (result.stdout, result.value) == ("x" * 5000 + "\n", "'done'")
        assert emulator.count("/stream_stdout_updates$") == 1
        assert emulator.count("/execute_async$") == 1


async def test_slow_long_polls_are_polled_until_the_code_ends(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    emulator.max_hold = 0.2
    async with await provider.create() as session:
        emulator.clear_requests()
        result = await session.run_code("import time\ntime.sleep(1.2)\n'slept'")
        assert result.value == "'slept'"
        statuses = [r.status for r in emulator.requests if r.path.endswith("/wait_for_status")]
        assert statuses.count(408) >= 2
        assert emulator.count("/execute_async$") == 1


async def test_create_is_retried_on_429_and_leaves_nothing_behind(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    emulator.inject("/create_and_await_running$", status=429)
    async with await provider.create() as session:
        assert await session.is_alive()
    assert emulator.count("/create_and_await_running$") == 2
    assert [d.status for d in emulator.account.listing()] == ["shutdown"]


async def test_quota_and_auth_errors_are_typed(emulator: RunloopEmulator) -> None:
    provider = emulator.provider(retry_deadline=1.0)
    emulator.inject("/create_and_await_running$", status=429, times=100)
    with pytest.raises(QuotaExceededError):
        await provider.create()
    emulator.clear_faults()
    emulator.clear_requests()
    wrong = emulator.provider(api_key="not-the-key")
    with pytest.raises(AuthenticationError):
        await wrong.create()
    assert emulator.count("/create_and_await_running$") == 1


async def test_no_key_is_a_clear_authentication_error_at_construction(
    emulator: RunloopEmulator,
) -> None:
    with pytest.raises(AuthenticationError, match="RUNLOOP_API_KEY"):
        RunloopProvider(base_url=emulator.url)
    assert emulator.requests == []


async def test_a_gone_devbox_raises_and_attach_returns_none(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    session = await provider.create()
    record = session.record
    emulator.expire(session.devbox_id)
    with pytest.raises(SandboxGoneError):
        await session.run_code("1")
    with pytest.raises(SandboxGoneError):
        await session.read_files(["x.txt"])
    assert not await session.is_alive()
    assert await provider.attach(record) is None
    await session.close()

    forgotten = await provider.create()
    emulator.expire(forgotten.devbox_id, forget=True)
    with pytest.raises(SandboxGoneError):
        await forgotten.run_command("true")
    assert await provider.attach(forgotten.record) is None
    assert await provider.destroy(forgotten.record) is False
    await forgotten.close()
    with pytest.raises(SessionClosedError):
        await forgotten.run_code("1")


async def test_missing_and_oversized_files(provider: RunloopProvider) -> None:
    spec = SessionSpec(limits=Limits(max_file_bytes=1000))
    async with await provider.create(spec) as session:
        with pytest.raises(InvalidPathError):
            await session.read_files(["nope.txt"])
        with pytest.raises(InvalidPathError):
            await session.list_files("no/such/dir")
        with pytest.raises(InvalidPathError):
            await session.remove_files(["."])
        with pytest.raises(InvalidPathError):
            await session.run_command("pwd", cwd="no/such/dir")
        background = await session.run_command("sleep 30 & echo started")
        assert (background.stdout, background.exit_code) == ("started\n", 0)
        await session.write_files({"big.bin": b"x" * 5000})
        with pytest.raises(InvalidInputError, match="read limit"):
            await session.read_files(["big.bin"])
        assert (await session.run_command("stat -c %s big.bin")).stdout == "5000\n"


async def test_pause_then_attach_resumes_with_files_and_variables(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    session = await provider.create(SessionSpec(metadata={"thread_id": "t-pause"}))
    try:
        await session.write_files({"kept.txt": b"disk"})
        await session.run_code(
            "import math, threading\nanswer = 42\nlock = threading.Lock()\n"
            "def twice(v):\n    return 2 * v\n"
        )
        await session.pause()
        await session.pause()
        assert emulator.account.get(session.devbox_id).status == "suspended"
        assert await session.is_alive()

        other_process = emulator.provider()
        again = await other_process.attach(json.loads(json.dumps(session.record)))
        assert again is not None
        assert emulator.account.get(session.devbox_id).status == "running"
        result = await again.run_code("twice(answer), math.pi > 3")
        assert result.value == "(84, True)"
        assert any("restored after the devbox resumed" in n for n in result.notices)
        assert any("not restored: lock" in n for n in result.notices), result.notices
        assert (await again.read_files(["kept.txt"]))["kept.txt"] == b"disk"
        await other_process.aclose()
    finally:
        await session.close()


async def test_using_a_paused_session_resumes_it(provider: RunloopProvider) -> None:
    async with await provider.create() as session:
        await session.run_code("n = 5")
        await session.pause()
        result = await session.run_code("n * 2")
        assert result.value == "10"


async def test_disk_snapshot_makes_a_devbox_with_the_files_and_variables(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as source:
        await source.write_files({"data/a.txt": b"alpha"})
        await source.run_code("items = ['x', 'y']")
        snapshot_id = await source.snapshot_disk()
        assert source.record["state"]["disk_snapshot_id"] == snapshot_id
        listing = await source.run_command(f"ls {WORKER_DIR}")
        assert "saved-variables" not in listing.stdout
        async with await provider.create_from_snapshot(snapshot_id) as copy:
            assert (await copy.read_files(["data/a.txt"]))["data/a.txt"] == b"alpha"
            result = await copy.run_code("items + ['z']")
            assert result.value == "['x', 'y', 'z']"
        assert (await source.run_code("len(items)")).value == "2"


async def test_list_sessions_and_destroy(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    mine = await provider.create(SessionSpec(metadata={"thread_id": "t-a"}))
    other = await provider.create(SessionSpec(metadata={"thread_id": "t-b"}))
    emulator.account.create({"metadata": {"thread_id": "t-a"}})
    try:
        listed = await provider.list_sessions({"thread_id": "t-a"})
        assert [r["session_id"] for r in listed] == [mine.session_id]
        assert listed[0]["metadata"] == {"thread_id": "t-a"}
        assert len(await provider.list_sessions()) == 2
        assert await provider.destroy(listed[0]) is True
        assert await provider.destroy(listed[0]) is False
        assert [r["session_id"] for r in await provider.list_sessions()] == [other.session_id]
    finally:
        await mine.close()
        await other.close()


async def test_a_lost_worker_is_reinstalled_and_the_restart_is_reported(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        await session.run_code("v = 1")
        await session.run_command(f"kill -9 $(cat {WORKER_DIR}/kernel.pid); rm -rf {WORKER_DIR}")
        result = await session.run_code("print('back')")
        assert result.stdout == "back\n"
        assert "v" not in (await session.dump_variables()).saved
        commands = _executions(emulator)
        assert sum("base64 -d" in command for command in commands) == 2


async def test_output_of_child_processes_is_captured_in_order(provider: RunloopProvider) -> None:
    async with await provider.create() as session:
        result = await session.run_code(
            "import os, subprocess\n"
            "print('python')\n"
            "os.system('echo from-shell; echo shell-err >&2')\n"
            "subprocess.run(['echo', 'from-subprocess'])\n"
            "print('python again')"
        )
        assert result.stdout == "python\nfrom-shell\nfrom-subprocess\npython again\n"
        assert result.stderr == "shell-err\n"


async def test_worker_timeouts_keep_the_session(provider: RunloopProvider) -> None:
    async with await provider.create(SessionSpec(limits=Limits(timeout=1.0))) as session:
        await session.run_code("kept = 'yes'")
        stuck = await session.run_code("import time\ntime.sleep(30)")
        assert stuck.timed_out
        assert stuck.exit_code is None
        assert (await session.run_code("kept")).value == "'yes'"


async def test_install_packages_runs_pip_with_validated_names(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        emulator.clear_requests()
        streamed: list[tuple[str, str]] = []
        result = await session.install_packages(
            ["requests[socks]>=2", "numpy==1.26.4"],
            on_output=lambda stream, text: streamed.append((stream, text)),
        )
        assert result.kind == "command"
        (request,) = _executions(emulator)
        op, argument = request.split()[-2:]
        assert op == "cmd"
        pip = json.loads(base64.b64decode(argument))["command"]
        assert pip == (
            "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --disable-pip-version-check "
            "--no-input --progress-bar off -- 'requests[socks]>=2' numpy==1.26.4"
        )
        # The emulated devbox has no network: pip's failure is a result, not an exception.
        assert result.exit_code != 0
        assert "No matching distribution" in result.stderr
        # ...and pip's output reached on_output while it ran.
        assert "No matching distribution" in "".join(t for s, t in streamed if s == "stderr")


async def test_the_key_never_reaches_records_results_or_logs(
    emulator: RunloopEmulator, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    provider = get_provider("runloop", api_key=FAKE_KEY, base_url=emulator.url)
    assert FAKE_KEY not in repr(provider)
    async with await provider.create(SessionSpec(metadata={"thread_id": "t-s"})) as session:
        result = await session.run_command("env")
        code = await session.run_code("import os\ndict(os.environ)")
        assert FAKE_KEY not in repr(session)
        for text in (json.dumps(session.record), result.model_dump_json(), code.model_dump_json()):
            assert FAKE_KEY not in text
    await provider.aclose()
    assert caplog.records
    assert FAKE_KEY not in caplog.text


def test_importing_the_provider_needs_no_sdk() -> None:
    """With the SDK unimportable, the module imports and building a provider names the extra."""
    script = (
        "import sys\n"
        "class Block:\n"
        "    def find_spec(self, name, path=None, target=None):\n"
        "        if name.split('.')[0] == 'runloop_api_client':\n"
        "            raise ImportError('blocked for the test')\n"
        "        return None\n"
        "sys.meta_path.insert(0, Block())\n"
        "import langchain_sandbox.providers.runloop as runloop\n"
        "import langchain_sandbox.testing.runloop_emulator\n"
        "try:\n"
        "    runloop.RunloopProvider(api_key='k')\n"
        "except ImportError as exc:\n"
        "    print(type(exc).__name__, exc.extra)\n"
    )
    done = subprocess.run(
        [sys.executable, "-c", script], capture_output=True, text=True, check=True
    )
    assert done.stdout.strip() == "MissingDependencyError runloop"


async def test_output_streams_live_to_on_output(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    async with await provider.create() as session:
        seen: list[tuple[str, str]] = []
        marks: list[str] = []

        def collect(stream: str, text: str) -> None:
            seen.append((stream, text))

        code = (
            "import sys, time, pathlib\n"
            "print('first', flush=True)\n"
            "sys.stderr.write('warn\\n')\n"
            "deadline = time.time() + 30\n"
            "while not pathlib.Path('/home/user/go').exists() and time.time() < deadline:\n"
            "    time.sleep(0.05)\n"
            "print('second')\n"
            "42"
        )
        task = asyncio.create_task(session.run_code(code, on_output=collect))
        # 'first' reaches the callback while the code still waits for the go file.
        for _ in range(600):
            # Output may arrive in pieces of any size: look at the stream so far, not one chunk.
            if "first" in "".join(text for stream, text in seen if stream == "stdout"):
                marks.append("first seen while running")
                break
            await asyncio.sleep(0.05)
        await session.write_files({"go": b""})
        result = await task
        assert marks == ["first seen while running"]
        assert (result.stdout, result.stderr, result.value) == ("first\nsecond\n", "warn\n", "42")
        streamed = "".join(text for stream, text in seen if stream == "stdout")
        assert streamed == "first\nsecond\n"
        assert "".join(text for stream, text in seen if stream == "stderr") == "warn\n"
        assert emulator.count("/execute_async$") == 2

        pieces: list[tuple[str, str]] = []
        command = await session.run_command(
            "echo one; echo two >&2; echo three", on_output=lambda s, t: pieces.append((s, t))
        )
        assert command.stdout == "one\nthree\n"
        # Each stream arrives whole and in order; how the two interleave is up to the transport.
        assert "".join(t for s, t in pieces if s == "stdout") == "one\nthree\n"
        assert "".join(t for s, t in pieces if s == "stderr") == "two\n"


async def test_a_create_whose_packages_fail_leaves_nothing_running(
    provider: RunloopProvider, emulator: RunloopEmulator
) -> None:
    with pytest.raises(SandboxError, match="no-such-package-xyz"):
        await provider.create(SessionSpec(packages=("no-such-package-xyz",)))
    assert [d.status for d in emulator.account.listing()] == ["shutdown"]
