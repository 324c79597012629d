"""Background processes on the local provider: what only it can show (its cgroups, its worker
killing a command's process group, a supervisor killed under a running process)."""

from __future__ import annotations

import asyncio
import json

from langchain_sandbox.processes import ProcessSpec
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.local import LocalProvider, LocalSession


async def test_a_process_outlives_the_command_that_started_it(session: LocalSession) -> None:
    # The worker kills each command's process group when the command ends: the supervisor
    # has a session of its own, so the process is still there for later calls.
    await session.start_process(ProcessSpec("sleeper", "sleep 300"))
    await session.run_command("true")
    await session.run_code("1")
    (info,) = await session.list_processes()
    assert info.state == "running"
    running = await session.run_command(f"kill -0 {info.pid} && echo yes")
    assert running.stdout == "yes\n"


async def test_a_supervisor_that_is_gone_makes_the_process_lost(session: LocalSession) -> None:
    await session.start_process(ProcessSpec("orphan", "sleep 300"))
    state = await session.run_command("cat /tmp/.langchain_sandbox/processes/orphan/state.json")
    supervisor = json.loads(state.stdout)["supervisor"]
    await session.run_command(f"kill -9 {supervisor}")
    (info,) = await session.list_processes()
    assert (info.name, info.state) == ("orphan", "lost")
    await session.stop_process("orphan")  # ends what the lost supervisor left running
    gone = await session.run_command(f"kill -0 {info.pid} 2>/dev/null || echo gone")
    assert gone.stdout == "gone\n"
    again = await session.start_process(ProcessSpec("orphan", "echo back; sleep 300"))
    assert (again.state, again.output) == ("running", "back\n")


async def test_a_background_fork_bomb_is_held_by_the_sessions_cgroup(
    provider: LocalProvider,
) -> None:
    limit = 40
    spec = SessionSpec(limits=Limits(max_processes=limit, timeout=30.0))
    async with await provider.create(spec) as bombed:
        await bombed.start_process(ProcessSpec("bomb", ":(){ :|:& };:; sleep 300"))
        counts = []
        for _ in range(20):
            counts.append(len(bombed.cgroup.pids()))
            await asyncio.sleep(0.1)
        assert max(counts) <= limit
        assert max(counts) > 10  # it did fork: the limit, not the bomb, stopped it
        # The machine is not: another session works meanwhile.
        async with await provider.create() as neighbour:
            assert (await neighbour.run_command("echo fine")).stdout == "fine\n"
        cgroup = bombed.cgroup
    assert cgroup.pids() == set()  # closing the session ended every process of the bomb
