"""The emulator speaks E2B's protocols as the real SDKs use them: async and sync, unmodified.

These tests drive ``e2b_code_interpreter`` directly (no provider in between) and pin what travels
on the wire through the emulator's request log.
"""

from __future__ import annotations

import asyncio
import base64
import os
import threading

import pytest
from e2b import (
    CommandExitException,
    FileNotFoundException,
    InvalidArgumentException,
    SandboxException,
    SandboxQuery,
    TimeoutException,
)
from e2b_code_interpreter import AsyncSandbox, Sandbox

from langchain_sandbox.testing.e2b_emulator import E2BEmulator


async def test_async_sdk_full_flow(sdk_env: E2BEmulator) -> None:
    sandbox = await AsyncSandbox.create(metadata={"thread_id": "t-1"}, envs={"GREETING": "hi"})
    try:
        first = await sandbox.run_code("x = 20\nprint('side effect')\nx * 2 + 2")
        assert first.text == "42"
        assert "".join(first.logs.stdout) == "side effect\n"
        assert first.error is None
        second = await sandbox.run_code("x + 1")  # same kernel: x survived
        assert second.text == "21"
        failed = await sandbox.run_code("def f():\n    raise ValueError('bad')\nf()")
        assert failed.error is not None
        assert (failed.error.name, failed.error.value) == ("ValueError", "bad")
        assert "line 2, in f" in failed.error.traceback

        done = await sandbox.commands.run("echo $GREETING from $(pwd); echo oops >&2")
        assert (done.stdout, done.stderr, done.exit_code) == ("hi from /home/user\n", "oops\n", 0)
        with pytest.raises(CommandExitException) as exited:
            await sandbox.commands.run("exit 7")
        assert exited.value.exit_code == 7

        await sandbox.files.write("/home/user/data/in.bin", bytes(range(256)))
        assert bytes(await sandbox.files.read("/home/user/data/in.bin", format="bytes")) == bytes(
            range(256)
        )
        listed = [e for e in await sandbox.files.list("/home/user", depth=2) if e.name[0] != "."]
        assert [(e.path, e.type.value, e.size) for e in listed] == [
            ("/home/user/data", "dir", 0),
            ("/home/user/data/in.bin", "file", 256),
        ]
        # Files written through envd are what the kernel sees, and the reverse.
        seen = await sandbox.run_code("open('/home/user/data/in.bin', 'rb').read()[:3]")
        assert seen.text == "b'\\x00\\x01\\x02'"
        await sandbox.files.remove("/home/user/data")
        assert not await sandbox.files.exists("/home/user/data")
        with pytest.raises(FileNotFoundException):
            await sandbox.files.read("/home/user/data/in.bin")
    finally:
        assert await sandbox.kill()
    assert not await sandbox.kill()  # 404 the second time

    routes = [r.route for r in sdk_env.requests]
    assert routes[0] == "POST /v2/sandboxes"
    create = sdk_env.requests[0]
    assert create.body["metadata"] == {"thread_id": "t-1"}
    assert create.body["envVars"] == {"GREETING": "hi"}
    assert create.body["templateID"] == "code-interpreter-v1"
    assert create.headers["x-api-key"] == "<redacted>"  # credentials never enter the log
    start = next(r for r in sdk_env.requests if r.route == "envd Start")
    # commands.run sends a chunked Connect envelope with bash -l -c; routed by header.
    assert start.body["process"]["args"] == [
        "-l",
        "-c",
        "echo $GREETING from $(pwd); echo oops >&2",
    ]
    assert start.headers["e2b-sandbox-port"] == "49983"
    assert start.headers.get("transfer-encoding") == "chunked"
    execute = next(r for r in sdk_env.requests if r.route == "jupyter execute")
    assert execute.headers["e2b-sandbox-port"] == "49999"
    assert execute.body == {
        "code": "x = 20\nprint('side effect')\nx * 2 + 2",
        "context_id": None,
        "language": None,
        "env_vars": None,
    }


def test_sync_sdk_full_flow(sdk_env: E2BEmulator) -> None:
    sandbox = Sandbox.create()
    try:
        assert sandbox.run_code("y = 5\ny * y").text == "25"
        assert sandbox.commands.run("echo sync").stdout == "sync\n"
        sandbox.files.write("/home/user/s.txt", "text")
        assert sandbox.files.read("/home/user/s.txt") == "text"
        assert sandbox.pause()
        again = Sandbox.connect(sandbox.sandbox_id)
        assert again.run_code("y").text == "5"  # memory survived the pause
    finally:
        Sandbox.kill(sandbox.sandbox_id)


async def test_pause_keeps_memory_and_files_and_connect_resumes(sdk_env: E2BEmulator) -> None:
    sandbox = await AsyncSandbox.create()
    await sandbox.run_code("state = {'n': 1}")
    await sandbox.files.write("/home/user/keep.txt", b"kept")
    assert await sandbox.pause()
    assert not await sandbox.pause()  # 409: already paused
    assert sdk_env.sandbox_ids("paused") == [sandbox.sandbox_id]
    assert not await sandbox.is_running()  # envd is unreachable while paused

    resumed = await AsyncSandbox.connect(sandbox.sandbox_id)
    assert (await resumed.run_code("state['n'] + 1")).text == "2"
    assert bytes(await resumed.files.read("/home/user/keep.txt", format="bytes")) == b"kept"
    statuses = [r.status for r in sdk_env.requests if r.route.endswith("/connect")]
    assert statuses == [201]  # 201: resumed from pause
    await resumed.kill()


async def test_list_filters_by_metadata_and_pages(sdk_env: E2BEmulator) -> None:
    made = [await AsyncSandbox.create(metadata={"app": "x", "n": str(i)}) for i in range(3)]
    other = await AsyncSandbox.create(metadata={"app": "y"})
    paginator = AsyncSandbox.list(query=SandboxQuery(metadata={"app": "x"}), limit=2)
    pages = []
    while paginator.has_next:
        pages.append([info.sandbox_id for info in await paginator.next_items()])
    assert [len(p) for p in pages] == [2, 1]
    assert sorted(i for page in pages for i in page) == sorted(s.sandbox_id for s in made)
    listing = [r for r in sdk_env.requests if r.route == "GET /v2/sandboxes"]
    assert listing[0].query["metadata"] == ["app=x"]
    for sandbox in [*made, other]:
        await sandbox.kill()


async def test_concurrent_creates_with_one_idempotency_key_make_one_sandbox(
    sdk_env: E2BEmulator,
) -> None:
    # A client's retry can reach the server while its first attempt is still being created:
    # both must get the same sandbox, never two (the provider relies on it to bound cost).
    first, second = await asyncio.gather(
        AsyncSandbox.create(idempotency_key="one-key"),
        AsyncSandbox.create(idempotency_key="one-key"),
    )
    try:
        assert first.sandbox_id == second.sandbox_id
        assert sdk_env.sandbox_ids() == [first.sandbox_id]
    finally:
        await first.kill()


async def test_sandboxes_are_routed_by_header_and_isolated(sdk_env: E2BEmulator) -> None:
    one, two = await asyncio.gather(AsyncSandbox.create(), AsyncSandbox.create())
    await asyncio.gather(one.run_code("who = 'one'"), two.run_code("who = 'two'"))
    await asyncio.gather(
        one.files.write("/home/user/f.txt", b"1"), two.files.write("/home/user/f.txt", b"2")
    )
    results = await asyncio.gather(one.run_code("who"), two.run_code("who"))
    assert [r.text for r in results] == ["'one'", "'two'"]
    assert bytes(await one.files.read("/home/user/f.txt", format="bytes")) == b"1"
    assert bytes(await two.files.read("/home/user/f.txt", format="bytes")) == b"2"
    await asyncio.gather(one.kill(), two.kill())


async def test_envd_requires_the_sandbox_access_token(sdk_env: E2BEmulator) -> None:
    import httpx

    sandbox = await AsyncSandbox.create()
    headers = {"E2b-Sandbox-Id": sandbox.sandbox_id, "E2b-Sandbox-Port": "49983"}
    async with httpx.AsyncClient() as client:
        denied = await client.get(
            f"{sdk_env.url}/files", params={"path": "/home/user"}, headers=headers
        )
        unknown = await client.get(
            f"{sdk_env.url}/health", headers={**headers, "E2b-Sandbox-Id": "nope"}
        )
    assert denied.status_code == 401
    assert unknown.status_code == 502
    assert "was not found" in unknown.json()["message"]
    await sandbox.kill()


async def test_a_command_can_be_killed_and_streams_output(sdk_env: E2BEmulator) -> None:
    sandbox = await AsyncSandbox.create()
    chunks: list[str] = []
    handle = await sandbox.commands.run(
        "echo started; sleep 60", background=True, on_stdout=chunks.append
    )
    for _ in range(600):
        if chunks:
            break
        await asyncio.sleep(0.05)
    assert chunks == ["started\n"]  # streamed while the command still runs
    assert await handle.kill()
    with pytest.raises(CommandExitException):
        await handle.wait()
    signal = next(r for r in sdk_env.requests if r.route == "envd SendSignal")
    assert signal.body == {"process": {"pid": handle.pid}, "signal": "SIGNAL_SIGKILL"}
    await sandbox.kill()


async def test_closing_the_execute_stream_interrupts_the_cell(sdk_env: E2BEmulator) -> None:
    sandbox = await AsyncSandbox.create()
    await sandbox.run_code("progress = 0")
    with pytest.raises(TimeoutException, match="timed out"):
        await sandbox.run_code(
            "import time\nwhile True:\n    progress += 1\n    time.sleep(0.01)", timeout=1
        )
    first = int((await sandbox.run_code("progress")).text)
    await asyncio.sleep(0.3)
    # The loop stopped when the client went away: the counter no longer moves.
    assert int((await sandbox.run_code("progress")).text) == first > 0
    await sandbox.kill()


async def test_figures_travel_as_png_results(sdk_env: E2BEmulator) -> None:
    sandbox = await AsyncSandbox.create()
    execution = await sandbox.run_code("import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nNone")
    pngs = [r.png for r in execution.results if r.png]
    assert len(pngs) == 1
    assert base64.b64decode(pngs[0]).startswith(b"\x89PNG")
    await sandbox.kill()


def _bwrap_children() -> list[int]:
    me = os.getpid()
    found = []
    for entry in filter(str.isdigit, os.listdir("/proc")):
        try:
            with open(f"/proc/{entry}/stat") as handle:
                stat = handle.read()
        except OSError:
            continue
        comm = stat[stat.index("(") + 1 : stat.rindex(")")]
        parent = int(stat[stat.rindex(")") + 2 :].split()[1])
        if parent == me and comm == "bwrap":
            found.append(int(entry))
    return found


def test_stopping_leaves_no_threads_processes_or_directories(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    before = {t.ident for t in threading.enumerate()}
    # Sandboxes of earlier tests may still be children of this process; count only new ones.
    others = set(_bwrap_children())
    emulator = E2BEmulator().start()
    for name, value in emulator.env().items():
        monkeypatch.setenv(name, value)
    monkeypatch.setenv("E2B_API_KEY", "e2b_any")
    sandbox = Sandbox.create()
    sandbox.run_code("x = 1")
    sandbox.commands.run("sleep 30", background=True)
    workspace = emulator.workspace(sandbox.sandbox_id)
    # The local session's own worker, and the one sandbox of the emulated VM (its init, the
    # kernel and the command inside it).
    assert (workspace.is_dir(), len(set(_bwrap_children()) - others)) == (True, 2)
    emulator.close()
    assert not workspace.exists()
    leftover = [t.name for t in threading.enumerate() if t.ident not in before]
    assert [name for name in leftover if name.startswith("e2b-emulator")] == []
    assert set(_bwrap_children()) - others == set()


async def test_emulated_sandboxes_are_isolated_and_links_do_not_lead_out(
    sdk_env: E2BEmulator,
) -> None:
    sandbox = await AsyncSandbox.create()
    probe = await sandbox.commands.run(
        "id -u; test -e /root && echo host-home-visible; ln -s /etc /home/user/etc-link; echo ok"
    )
    assert probe.stdout == "1000\nok\n"  # non-root, and the host's home is not there
    # Host-side file operations do not follow a link out of the workspace.
    with pytest.raises(FileNotFoundException):
        await sandbox.files.read("/home/user/etc-link/hostname")
    with pytest.raises(InvalidArgumentException, match="cannot write"):
        await sandbox.files.write("/home/user/etc-link/planted", b"x")
    names = [e.name for e in await sandbox.files.list("/home/user")]
    assert "etc-link" in names  # listed as a link, never followed
    info = await sandbox.files.get_info("/home/user/etc-link")
    assert (info.type.value, info.symlink_target) == ("symlink", "/etc")
    await sandbox.files.remove("/home/user/etc-link")  # removes the link, not its target
    assert not await sandbox.files.exists("/home/user/etc-link")
    await sandbox.kill()


async def test_code_contexts_are_separate_kernels(sdk_env: E2BEmulator) -> None:
    sandbox = await AsyncSandbox.create()
    await sandbox.files.write("/home/user/sub/marker.txt", b"here")
    context = await sandbox.create_code_context(cwd="/home/user/sub")
    await sandbox.run_code("name = 'default'")
    await sandbox.run_code("name = 'other'", context=context)
    assert (await sandbox.run_code("name")).text == "'default'"
    in_context = await sandbox.run_code("import os\nname, os.listdir('.')", context=context)
    assert in_context.text == "('other', ['marker.txt'])"
    assert {c.id for c in await sandbox.list_code_contexts()} == {"default", context.id}
    await sandbox.restart_code_context(context)
    restarted = await sandbox.run_code("name", context=context)
    assert restarted.error is not None
    assert restarted.error.name == "NameError"
    await sandbox.remove_code_context(context)
    assert [c.id for c in await sandbox.list_code_contexts()] == ["default"]
    await sandbox.kill()


async def test_a_failure_of_the_emulator_itself_is_a_500_that_names_it(
    sdk_env: E2BEmulator, monkeypatch: pytest.MonkeyPatch, capfd: pytest.CaptureFixture[str]
) -> None:
    """An error of the emulator's own (here the machine behind a sandbox failing to start with
    an ``OSError``) answers 500 with its message, as the real API answers its own failures, and
    prints its traceback: a connection closed without an answer would only say "connection
    closed before message completed"."""

    def broken(*args: object, **kwargs: object) -> None:
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(sdk_env, "_new_machine", broken)
    with pytest.raises(SandboxException, match="No space left on device") as failed:
        await AsyncSandbox.create()
    assert type(failed.value) is SandboxException  # no narrower kind: the API's own failure
    assert "emulator error" in str(failed.value)
    assert "OSError" in capfd.readouterr().err
    assert [r.status for r in sdk_env.requests if r.route == "POST /v2/sandboxes"] == [500]
