"""Life and death of local sessions: close, dead workers, attach, leftovers of dead processes."""

from __future__ import annotations

import asyncio
import json
import os
import signal
import stat
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from langchain_sandbox import SessionSpec
from langchain_sandbox.errors import InvalidInputError, SessionClosedError
from langchain_sandbox.providers.local import WORKER_RESTARTED, LocalProvider
from langchain_sandbox.providers.local._cgroups import SessionCgroup, detect_cgroups


def _mode(path: str) -> int:
    return stat.S_IMODE(os.stat(path).st_mode)


def _gone(*paths: str) -> bool:
    return not any(os.path.exists(path) for path in paths)


def _exists(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    return True


async def test_close_kills_every_process_and_removes_everything(provider: LocalProvider) -> None:
    session = await provider.create()
    # A process that left the worker's process group and session, as escapes go.
    await session.run_code(
        "import subprocess\nsubprocess.Popen(['sleep', '300'], start_new_session=True)"
    )
    await session.run_command("setsid sleep 301 > /dev/null 2>&1 &")
    pids = session.cgroup.pids()
    assert len(pids) >= 4  # bubblewrap, worker, two sleeps
    cgroup_dirs = list(session.cgroup.directories.values())
    assert cgroup_dirs
    await session.close()
    for _ in range(100):
        if not any(_exists(pid) for pid in pids):
            break
        await asyncio.sleep(0.05)
    assert not any(_exists(pid) for pid in pids)
    assert _gone(session.directory)
    assert _gone(*cgroup_dirs)
    await session.close()  # idempotent
    assert not await session.is_alive()
    with pytest.raises(SessionClosedError):
        await session.run_code("1")
    with pytest.raises(SessionClosedError):
        await session.read_files(["x"])
    assert await provider.attach(session.record) is None


async def test_a_killed_worker_is_restarted_with_a_notice(provider: LocalProvider) -> None:
    async with await provider.create() as session:
        await session.run_code("x = 1")
        await session.write_files({"kept.txt": b"files survive"})
        pid = session.worker_pid
        assert pid is not None
        os.kill(pid, signal.SIGKILL)
        for _ in range(100):
            if session.worker_pid is None:
                break
            await asyncio.sleep(0.02)
        assert await session.is_alive()
        result = await session.run_code("'x' in globals()")
        assert result.value == "False"
        assert WORKER_RESTARTED in result.notices
        assert (await session.read_files(["kept.txt"]))["kept.txt"] == b"files survive"
        assert (await session.run_code("1")).notices == []


async def test_worker_killed_by_its_own_code_is_reported(provider: LocalProvider) -> None:
    async with await provider.create() as session:
        result = await session.run_code("import os, signal\nos.kill(os.getpid(), signal.SIGKILL)")
        assert not result.ok
        assert result.error is not None
        assert result.error.name == "SandboxWorkerDied"
        assert any(WORKER_RESTARTED in n for n in result.notices)
        assert (await session.run_code("2 + 2")).value == "4"


async def test_attach_and_records(provider: LocalProvider) -> None:
    async with await provider.create() as session:
        assert _mode(session.directory) == 0o700
        assert _mode(session.workspace_dir) == 0o700
        record = session.record
        json.dumps(record)
        assert record["provider"] == "local"
        assert await provider.attach(record) is session
        gone = {"provider": "local", "session_id": "0" * 32, "sandbox_id": "0" * 32}
        assert await provider.attach(gone) is None  # type: ignore[arg-type]
        assert not provider.capabilities.attach_across_processes
        assert session.directory not in json.dumps(record)


async def test_leftovers_of_a_dead_process_are_listed_and_destroyed(tmp_path: Path) -> None:
    base = tmp_path / "sandboxes"
    script = textwrap.dedent(
        f"""
        import asyncio, os
        from langchain_sandbox.providers.base import SessionSpec
        from langchain_sandbox.providers.local import LocalProvider

        async def main():
            provider = LocalProvider(base_dir={str(base)!r})
            session = await provider.create(SessionSpec(metadata={{"thread_id": "t-1"}}))
            await session.run_command("setsid sleep 300 > /dev/null 2>&1 &")
            print(session.session_id, flush=True)
            os._exit(0)  # dies without closing anything

        asyncio.run(main())
        """
    )
    completed = await asyncio.to_thread(
        subprocess.run, [sys.executable, "-c", script], capture_output=True, text=True, timeout=120
    )
    assert completed.returncode == 0, completed.stderr
    session_id = completed.stdout.strip()
    provider = LocalProvider(base_dir=base)
    records = await provider.list_sessions({"thread_id": "t-1"})
    assert [r["session_id"] for r in records] == [session_id]
    assert records[0]["state"]["orphaned"] is True
    assert await provider.list_sessions({"thread_id": "other"}) == []
    leftover_cgroups = SessionCgroup.leftover(detect_cgroups(), session_id)
    assert leftover_cgroups.directories, "the dead process left its cgroups behind"
    assert await provider.destroy(records[0]) is True
    assert not (base / "sessions" / session_id).exists()
    assert _gone(*leftover_cgroups.directories.values())
    assert await provider.destroy(records[0]) is False
    with pytest.raises(InvalidInputError):
        await provider.destroy({"provider": "local", "session_id": "../../etc", "sandbox_id": "x"})


async def test_a_session_being_made_is_never_listed_as_an_orphan(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """``gc`` (another process's provider on the same directory) looks while a session's
    workspace is being mounted: the session already names its live owner, so it is not taken
    for a dead process's leftover and destroyed under its maker."""
    from langchain_sandbox.providers.local import provider as local_provider

    base = tmp_path / "sandboxes"
    seen: list[list[dict[str, object]]] = []
    mount_ports = local_provider.mount_ports

    def looking_mount(ports: Path) -> None:
        # Called in the thread that makes the directory: no event loop runs there.
        listing = asyncio.run(LocalProvider(base_dir=base).list_sessions())
        seen.append([dict(record["state"]) for record in listing])
        mount_ports(ports)

    monkeypatch.setattr(local_provider, "mount_ports", looking_mount)
    provider = LocalProvider(base_dir=base)
    async with await provider.create():
        pass
    assert seen, "the port directory was never mounted here (not root?)"
    assert seen == [[{"owner_pid": os.getpid(), "live": False, "orphaned": False}]]


async def test_a_second_close_returns_only_once_the_first_has_removed_everything(
    provider: LocalProvider,
) -> None:
    """An emulator's reaper closing a pod while the emulator shuts its provider down: the
    provider's close must not return (and its directory be removed) under a mounted workspace."""
    session = await provider.create()
    await session.run_code("1")
    first = asyncio.create_task(session.close())
    await asyncio.sleep(0)  # the first close is under way, killing the worker
    await provider.aclose()
    assert _gone(session.directory)
    assert first.done()
    await first


async def test_closing_during_a_call_ends_it_as_closed(provider: LocalProvider) -> None:
    session = await provider.create()
    running = asyncio.create_task(session.run_code("import time\ntime.sleep(60)"))
    await asyncio.sleep(0.5)
    await session.close()
    with pytest.raises(SessionClosedError):
        await asyncio.wait_for(running, 30)


async def test_sessions_created_at_once_on_a_new_provider_all_get_the_compiled_worker(
    tmp_path: Path,
) -> None:
    """The first sessions of a provider find the machine's facts and compile the worker; made at
    once, each must start with the worker its sandbox was given (a race set one session's
    bytecode path and another's copy of the files apart, and made the compile fail)."""
    provider = LocalProvider(base_dir=tmp_path / "sandboxes")
    try:
        sessions = await asyncio.gather(*(provider.create() for _ in range(4)))
        shown = await asyncio.gather(
            *(s.run_shell("ls /opt/langchain-sandbox/ && echo alive") for s in sessions)
        )
        for result in shown:
            assert "worker.pyc" in result.stdout, result.stdout
            assert result.stdout.endswith("alive\n")
    finally:
        await provider.aclose()


def test_the_worker_compiled_by_many_threads_at_once_is_compiled_for_each(tmp_path: Path) -> None:
    """Providers in other threads (or processes) may compile into the same directory at once:
    every one gets the bytecode, none a half-moved or stolen staging file."""
    from concurrent.futures import ThreadPoolExecutor
    from functools import partial

    from langchain_sandbox.providers.local._bubblewrap import describe_python
    from langchain_sandbox.providers.local._launcher import compile_worker

    python = describe_python(sys.executable)
    caches = [tmp_path / f"runtime-{attempt}" for attempt in range(10)]
    for cache in caches:
        with ThreadPoolExecutor(4) as pool:
            made = list(pool.map(partial(compile_worker, python, isolated=True), [str(cache)] * 4))
        assert all(path is not None and Path(path).is_file() for path in made), made
        assert not list(cache.glob("*.tmp"))


def test_the_interpreter_is_asked_once_per_file_and_again_when_it_is_made_anew(
    tmp_path: Path,
) -> None:
    """Every provider of a process asks its interpreter where it lives; the answer is remembered
    for that interpreter file, and a file made anew at the same path (a venv re-created) is asked
    again."""
    from langchain_sandbox.providers.local._bubblewrap import describe_python

    asked = tmp_path / "asked"
    python = tmp_path / "python"

    def make() -> None:
        python.write_text(f'#!/bin/sh\necho >> "{asked}"\nexec "{sys.executable}" "$@"\n')
        python.chmod(0o755)

    make()
    first = describe_python(str(python))
    assert describe_python(str(python)) == first
    assert asked.read_text().count("\n") == 1
    python.unlink()
    make()
    assert describe_python(str(python)) == first
    assert asked.read_text().count("\n") == 2


async def test_providers_with_their_own_directories_share_one_compiled_worker(
    tmp_path: Path,
) -> None:
    """The worker's bytecode is addressed by its sources and the interpreter and kept beside the
    environments: a second provider (another base directory, another process) reuses it."""
    cache = tmp_path / "environments" / ".bytecode"
    for attempt in range(2):
        provider = LocalProvider(
            base_dir=tmp_path / f"sandboxes-{attempt}", environments_dir=tmp_path / "environments"
        )
        try:
            # "host": no environment to build in this new cache.
            session = await provider.create(SessionSpec(template="host"))
            assert (await session.run_code("1 + 1")).value == "2"
        finally:
            await provider.aclose()
        if attempt == 0:
            made = {path.name: path.stat().st_mtime_ns for path in cache.iterdir()}
            assert any(name.startswith("worker-") for name in made), made
    assert {path.name: path.stat().st_mtime_ns for path in cache.iterdir()} == made
