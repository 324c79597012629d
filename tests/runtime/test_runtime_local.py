"""The runtime on the real local provider: state that survives a process, forks, isolation between
threads, concurrency, and a close that leaves no process behind."""

from __future__ import annotations

import asyncio
import json
import subprocess
import sys
import textwrap
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import psutil
import pytest

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

from .conftest import wait_until


def _runtime(root: Path) -> SandboxRuntime:
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / "sessions"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        persist="every_call",  # records travel between runtimes here, as checkpoints would
    )


_PREVIOUS_PROCESS = textwrap.dedent(
    """
    import json, sys
    from pathlib import Path
    from langchain_sandbox.runtime import SandboxRuntime
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter

    root = Path(sys.argv[1])
    runtime = SandboxRuntime(
        "local",
        provider_options={"base_dir": root / "sessions-old"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        persist="every_call",
    )
    runtime.write_files("thread-1", {"report/data.csv": b"a,b\\n1,2\\n"})
    outcome = runtime.run_code(
        "thread-1", "import statistics\\nvalues = [3, 5, 7]\\ndef double(x):\\n    return 2 * x"
    )
    assert outcome.value.ok, outcome.value
    print(json.dumps(outcome.record))
    runtime.close()
    """
)


def test_record_from_a_previous_process_restores_files_and_variables(tmp_path: Path) -> None:
    done = subprocess.run(
        [sys.executable, "-c", _PREVIOUS_PROCESS, str(tmp_path)],
        capture_output=True,
        text=True,
        timeout=240,
        check=False,
    )
    assert done.returncode == 0, done.stderr
    record = json.loads(done.stdout.strip().splitlines()[-1])

    with _runtime(tmp_path) as runtime:
        outcome = runtime.run_code(
            "thread-1",
            "print(statistics.mean(values), double(21), open('report/data.csv').read())",
            record=record,
        )
        assert outcome.value.ok, outcome.value
        assert outcome.value.stdout.split() == ["5", "42", "a,b", "1,2"]
        assert any("restored" in n for n in outcome.value.notices)
        assert outcome.record["revision"] == record["revision"] + 1


def test_fork_restores_older_state_and_the_original_keeps_its_own(tmp_path: Path) -> None:
    with _runtime(tmp_path) as runtime:
        at_one = runtime.run_code("t", "open('log.txt', 'w').write('one\\n'); stage = 1").record
        at_two = runtime.run_code("t", "open('log.txt', 'a').write('two\\n'); stage = 2").record

        fork = runtime.run_code("t", "print(stage, open('log.txt').read().split())", record=at_one)
        assert fork.value.stdout == "1 ['one']\n"
        fork_more = runtime.run_code("t", "stage = 10", record=fork.record)
        assert fork_more.value.ok

        original = runtime.run_code(
            "t", "print(stage, open('log.txt').read().split())", record=at_two
        )
        assert original.value.stdout == "2 ['one', 'two']\n"
        # and the fork, continued later, still sees its own
        back = runtime.run_code("t", "print(stage)", record=fork_more.record)
        assert back.value.stdout == "10\n"


def test_the_shell_keeps_cd_and_export_and_follows_forks_and_new_processes(
    tmp_path: Path,
) -> None:
    with _runtime(tmp_path) as runtime:
        at_one = runtime.run_shell("t", "mkdir -p a b && cd a && export STAGE=one").record
        assert runtime.run_shell("t", 'pwd; echo "$STAGE"').value.stdout == "/home/user/a\none\n"
        at_two = runtime.run_shell("t", "cd ../b && export STAGE=two").record

        fork = runtime.run_shell("t", 'pwd; echo "$STAGE"', record=at_one)
        assert fork.value.stdout == "/home/user/a\none\n"
        original = runtime.run_shell("t", 'pwd; echo "$STAGE"', record=at_two)
        assert original.value.stdout == "/home/user/b\ntwo\n"

    # A new process: another runtime, same snapshot store, the record from the checkpoint.
    with _runtime(tmp_path) as resumed:
        again = resumed.run_shell("t", 'pwd; echo "$STAGE"', record=original.record)
        assert again.value.stdout == "/home/user/b\ntwo\n"
        assert any("restored" in n for n in again.value.notices)


def test_parallel_first_calls_create_one_sandbox_and_threads_are_isolated(
    tmp_path: Path,
) -> None:
    with _runtime(tmp_path) as runtime:
        with ThreadPoolExecutor(6) as pool:
            outcomes = list(
                pool.map(
                    lambda i: runtime.run_command("a", f"echo {i} >> calls.txt"),
                    range(6),
                )
            )
        assert all(o.value.ok for o in outcomes)
        assert len(runtime.live_sessions()) == 1
        lines = runtime.read_files("a", ["calls.txt"]).value["calls.txt"].split()
        assert sorted(lines) == [str(i).encode() for i in range(6)]

        listing = runtime.run_command("b", "ls -a /home/user; cat /home/user/calls.txt").value
        assert "calls.txt" not in listing.stdout
        assert listing.exit_code != 0


async def test_async_callers_on_their_own_loop(tmp_path: Path) -> None:
    async with _runtime(tmp_path) as runtime:
        results = await asyncio.gather(
            *(runtime.arun_code(f"thread-{i}", f"value = {i} * 2\nvalue") for i in range(4))
        )
        assert [r.value.value for r in results] == ["0", "2", "4", "6"]
        assert len(runtime.live_sessions()) == 4


def test_close_leaves_no_process_behind(tmp_path: Path) -> None:
    me = psutil.Process()
    before = {p.pid for p in me.children(recursive=True)}
    runtime = _runtime(tmp_path)
    for thread in ("a", "b", "c"):
        runtime.run_code(thread, "import time")
    started = {p.pid for p in me.children(recursive=True)} - before
    assert started, "sessions run in child processes"
    runtime.close()

    def _all_gone() -> bool:
        return not any(psutil.pid_exists(pid) and _alive(pid) for pid in started)

    assert wait_until(_all_gone, timeout=30)


def _alive(pid: int) -> bool:
    try:
        return psutil.Process(pid).status() != psutil.STATUS_ZOMBIE
    except psutil.NoSuchProcess:
        return False


async def test_cancelling_a_run_stops_the_code_and_keeps_the_thread_usable(tmp_path: Path) -> None:
    me = psutil.Process()
    # Other tests' sandboxes may still be children of this process; only this runtime's count.
    others = {p.pid for p in me.children(recursive=True)}
    async with _runtime(tmp_path) as runtime:
        await runtime.arun_code("t", "kept = 'before'")
        before = {p.pid for p in me.children(recursive=True)} - others
        assert before
        task = asyncio.create_task(
            runtime.arun_code("t", "import time\nwhile True:\n    time.sleep(0.05)", timeout=600)
        )
        await asyncio.sleep(1.0)  # let it start; the assertions below do not depend on this
        task.cancel()
        with pytest.raises(asyncio.CancelledError):
            await task
        # Hang guard only: without the cancellation reaching the sandbox this waits for the
        # provider's own 60 s timeout.
        after = await asyncio.wait_for(runtime.arun_code("t", "print(kept)"), timeout=45)
        assert after.value.stdout == "before\n"
        assert any("restored" in n for n in after.value.notices)
        assert await asyncio.to_thread(wait_until, lambda: not any(_alive(p) for p in before), 60.0)


async def test_the_runtime_leaves_create_retries_to_the_provider(tmp_path: Path) -> None:
    """A provider retries its own create (E2B under one idempotency key); a second layer of
    retries would multiply attempts and could leave a sandbox behind a lost response."""
    from langchain_sandbox.errors import ProviderUnavailableError
    from langchain_sandbox.providers.base import Session, SessionSpec
    from langchain_sandbox.providers.local import LocalProvider

    class Unavailable(LocalProvider):
        creates = 0

        async def create(self, spec: SessionSpec | None = None) -> Session:
            Unavailable.creates += 1
            raise ProviderUnavailableError("503 from the provider, after its own retries")

    runtime = SandboxRuntime(
        Unavailable(base_dir=tmp_path / "sessions"),
        snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs")),
    )
    try:
        with pytest.raises(ProviderUnavailableError):
            await runtime.arun_code("t", "1")
        assert Unavailable.creates == 1
    finally:
        await runtime.aclose()


def _capped_runtime(root: Path, max_sessions: int) -> SandboxRuntime:
    """A runtime of the default policy (no snapshot outside a graph) on a small cap."""
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / "sessions"},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        max_sessions=max_sessions,
    )


def test_more_threads_than_live_sandboxes_keep_variables_and_files(tmp_path: Path) -> None:
    """Six threads on a cap of two, under the default policy outside any graph (no call would
    snapshot): each call finds its thread's variables (a function and a counter) and files, with
    no notice, and the cap holds."""
    threads = [f"t{i}" for i in range(6)]
    with _capped_runtime(tmp_path, 2) as runtime:
        for i, thread in enumerate(threads):
            code = f"count = 0\ndef owner():\n    return {i}"
            assert runtime.run_code(thread, code).value.ok
            runtime.write_files(thread, {"notes/owner.txt": f"{i}".encode()})
        for round_ in range(1, 3):
            for i, thread in enumerate(threads):
                result = runtime.run_code(
                    thread,
                    "count += 1\nprint(owner(), count, open('notes/owner.txt').read())",
                ).value
                assert result.stdout == f"{i} {round_} {i}\n", (thread, result)
                assert result.notices == []
                assert len(runtime.live_sessions()) <= 2


def test_a_spilled_thread_is_told_what_could_not_be_kept(tmp_path: Path) -> None:
    """A spill keeps what a snapshot can: a variable that cannot be pickled is gone, and the
    thread's next call says so (a spill is silent only when nothing was lost)."""
    with _capped_runtime(tmp_path, 1) as runtime:
        assert runtime.run_code("a", "kept = 1\nticks = (i for i in range(3))").value.ok
        runtime.run_code("b", "pass")
        result = runtime.run_code("a", "print(kept, 'ticks' in globals())").value
        assert result.stdout == "1 False\n"
        assert any("ticks" in notice for notice in result.notices), result.notices
