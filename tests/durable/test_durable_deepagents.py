"""Durable Deep Agents (issue #11): ``create_deep_agent(model, backend=SandboxBackend(),
checkpointer=saver)`` and nothing else, across real processes (``deep_agent_worker.py``), with
SQLite and a real Postgres server.

Every new process starts with no sandbox at all: what it finds came through the checkpointer (the
conversation) and the snapshot store (the records and snapshots the backend filed).
"""

from __future__ import annotations

import asyncio
import json
import os
import signal
import subprocess
import sys
import uuid
from pathlib import Path
from typing import Any

import forked_python
import pytest
from langgraph.checkpoint.memory import InMemorySaver

pytest.importorskip("deepagents")

WORKER = Path(__file__).with_name("deep_agent_worker.py")
HANG_GUARD = 240  # seconds; only so that a broken run fails instead of hanging
FINAL = "/home/user/app\none\nfirst second\na,b\n1,2"
BOTH = "parent\nfrom the subagent\nran\n"
"""What the parent prints of its own file and its subagent's (``--subagent``)."""


class Thread:
    """The arguments every process of one thread shares."""

    def __init__(self, saver: tuple[str, str], blobs: str, *extra: str) -> None:
        kind, target = saver
        self.base = [
            sys.executable, str(WORKER), "--saver", kind, "--target", target,
            "--blobs", blobs, "--thread", f"t-{uuid.uuid4().hex[:8]}", *extra,
        ]  # fmt: skip

    def run(self, *args: str) -> dict[str, Any]:
        proc = forked_python.run(
            [*self.base, *args], capture_output=True, text=True, timeout=HANG_GUARD, check=False
        )
        done = [e for e in _events(proc.stdout) if e["event"] == "done"]
        if proc.returncode != 0 or not done:
            raise AssertionError(f"worker failed ({proc.returncode}):\n{proc.stderr[-4000:]}")
        return done[-1]

    def kill_when_blocked(self, *args: str) -> None:
        doomed = forked_python.popen(
            [*self.base, *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True
        )
        try:
            assert doomed.stdout is not None
            for line in doomed.stdout:
                if line.startswith("{") and json.loads(line)["event"] == "blocked":
                    break
            else:
                raise AssertionError(f"worker ended early:\n{doomed.stderr.read()[-4000:]}")  # type: ignore[union-attr]
        finally:
            os.kill(doomed.pid, signal.SIGKILL)
            doomed.communicate(timeout=HANG_GUARD)
        assert doomed.returncode == -signal.SIGKILL


def _events(stdout: str) -> list[dict[str, Any]]:
    return [json.loads(line) for line in stdout.splitlines() if line.startswith("{")]


def test_sigkill_then_resume_in_a_new_process(saver: tuple[str, str], blobs: str) -> None:
    """Killed while the model thinks about turn 2; a new process resumes the thread and its
    command sees the files, the directory and the exported variable of the dead process."""
    thread = Thread(saver, blobs)
    thread.kill_when_blocked("--message", "go", "--block-at-turn", "2")
    resumed = thread.run()
    *_, last_tool = resumed["tools"]
    assert FINAL in last_tool
    assert "[notice] The sandbox was restored from the snapshot" in last_tool
    assert resumed["last"] == "done"


def test_a_call_rerun_after_sigkill_mid_step_starts_from_the_finished_call(
    saver: tuple[str, str], blobs: str
) -> None:
    """Turn 0's two calls: ``execute`` finishes (its tool message is saved among the step's
    pending writes, its record filed); the SIGKILL hits while ``write_file`` waits. The resume
    re-runs only ``write_file``: it must start from what ``execute`` did, and the later turns
    must find both calls' work."""
    thread = Thread(saver, blobs)
    thread.kill_when_blocked("--message", "go", "--block-call", "call_0_1")

    resumed = thread.run()
    assert FINAL in resumed["tools"][-1], resumed["tools"]


def test_interrupt_then_approve_in_a_new_process(saver: tuple[str, str], blobs: str) -> None:
    """``interrupt_on={"execute": True}``: each process stops at the approval of a command and
    exits; the next one approves it and finds the sandbox of the one before."""
    thread = Thread(saver, blobs, "--approve-execute")
    first = thread.run("--message", "go")
    assert first["interrupted"]
    assert first["tools"] == []
    approve = json.dumps({"decisions": [{"type": "approve"}]})
    outputs: list[str] = []
    for _ in range(3):
        step = thread.run("--resume", approve)
        outputs = step["tools"]
        if not step["interrupted"]:
            break
    assert FINAL in outputs[-1]
    assert step["last"] == "done"


def test_fork_from_an_old_checkpoint_sees_its_own_files(saver: tuple[str, str], blobs: str) -> None:
    """Run the thread to the end; then two forks in new processes: one from the checkpoint
    after turn 0's tools (before the edit), one from the end. Each sees the files of its own
    checkpoint, and neither changes what the other sees."""
    thread = Thread(saver, blobs)
    done = thread.run("--message", "go")
    assert FINAL in done["tools"][-1]
    after_turn_0 = after_first_tools(done)
    early = thread.run("--checkpoint-id", after_turn_0, "--message", "fork: early")
    assert _shown(early) == "first\nearly"
    end_of_first_run = done["history"][0]["id"]  # history is newest first
    late = thread.run("--checkpoint-id", end_of_first_run, "--message", "fork: late")
    assert _shown(late) == "first second\nlate"
    again = thread.run("--checkpoint-id", after_turn_0, "--message", "fork: again")
    assert _shown(again) == "first\nagain"


@pytest.mark.parametrize("durability", ["sync", "async"])
def test_a_replayed_step_keeps_its_own_files_across_processes(
    saver: tuple[str, str], blobs: str, durability: str
) -> None:
    """Time travel to the checkpoint between turn 0's model call and its tools, then run on: the
    very same AI message's tool calls run again (same message and tool call ids, as with any
    model: the message is in the checkpoint), and ``run.txt`` gets this run's time. New
    processes continuing either branch read ``run.txt`` of their own branch, not the run that
    filed first. Under ``durability="async"`` a call may run before its step's checkpoint is
    saved: it still finds the records of its own branch."""
    thread = Thread(saver, blobs, "--durability", durability)
    original, stamps = replay_first_tools(thread)
    assert branch_stamps(thread, original) == stamps


def replay_first_tools(thread: Thread) -> tuple[dict[str, Any], list[str]]:
    """Run the thread, then replay it from before turn 0's tools (each in its own process);
    return the original run and the ``run.txt`` each branch printed at its end."""
    original = thread.run("--message", "go")
    before_tools = next(  # turn 0's two calls: two tool tasks
        row["id"] for row in original["history"] if row["tools"] == 0 and "tools" in row["next"]
    )
    replayed = thread.run("--checkpoint-id", before_tools)
    stamps = [last_line(run["tools"][-1]) for run in (original, replayed)]
    assert stamps[0] != stamps[1]
    return original, stamps


def branch_stamps(thread: Thread, original: dict[str, Any]) -> list[str]:
    """``run.txt`` as new processes continuing the original branch and the replay see it."""
    on_replay = thread.run("--message", "show")  # the thread's head (before the next fork)
    end_of_original = original["history"][0]["id"]  # history is newest first
    on_original = thread.run("--checkpoint-id", end_of_original, "--message", "show")
    return [last_line(on_original["tools"][-1]), last_line(on_replay["tools"][-1])]


def last_line(output: str) -> str:
    """The last line a command printed, before Deep Agents' exit code line."""
    lines = [line for line in output.splitlines() if line and not line.startswith("[")]
    return lines[-1]


def after_first_tools(run: dict[str, Any]) -> str:
    """The checkpoint after turn 0's two tool calls, before the model's next turn."""
    return str(
        next(
            row["id"]
            for row in reversed(run["history"])
            if row["tools"] == 2 and row["next"] == ["model"]
        )
    )


def _shown(run: dict[str, Any]) -> str:
    """What the fork's command printed (the file before and after), without the notices."""
    text = run["tools"][-1]
    assert text.endswith("[Command succeeded with exit code 0]")
    lines = text.removesuffix("[Command succeeded with exit code 0]").splitlines()
    return "\n".join(line for line in lines if line and not line.startswith("[notice]"))


@pytest.mark.parametrize("use_async", [False, True])
def test_the_parent_continues_from_what_its_subagent_wrote(
    tmp_path: Path, use_async: bool, memory_saver: InMemorySaver
) -> None:
    """A subagent (the ``task`` tool) runs on a conversation of its own, with the same backend:
    what it wrote (``write_file``, ``execute``) is there for the parent's next call, and for a
    runtime with a sandbox directory of its own but the same store (as a new process has),
    however late the checkpointer saves the parent's steps."""

    from deep_agent_worker import REPORT, subagent_script
    from deepagents import create_deep_agent
    from langchain_core.messages import HumanMessage

    from langchain_sandbox.deepagents import SandboxBackend
    from langchain_sandbox.runtime import SandboxRuntime
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
    from langchain_sandbox.testing import ScriptedToolModel, call

    saver = memory_saver
    config: Any = {"configurable": {"thread_id": "delegating"}}

    def run(base: str, script: Any, message: str) -> list[str]:
        store = LocalDirectoryBlobStore(tmp_path / "blobs")
        provider_options = {"base_dir": tmp_path / base}
        with SandboxRuntime(
            "local", provider_options=provider_options, snapshotter=Snapshotter(store)
        ) as runtime:
            agent = create_deep_agent(
                ScriptedToolModel(script=script),
                backend=SandboxBackend(runtime=runtime),
                checkpointer=saver,
            )
            payload = {"messages": [HumanMessage(message)]}
            if use_async:
                result = asyncio.run(agent.ainvoke(payload, config))
            else:
                result = agent.invoke(payload, config)
        return [m.text for m in result["messages"] if m.type == "tool"]

    tools = run("first", subagent_script(), "go")
    assert tools[1] == "report written"
    assert tools[-1].startswith(BOTH), tools[-1]

    again = [call("execute", command=f"cat /home/user/parent.txt {REPORT}"), "read"]
    tools = run("second", lambda messages: again[messages[-1].type == "tool"], "again")
    assert BOTH in tools[-1], tools[-1]
    assert "restored from the snapshot" in tools[-1]


def test_a_new_process_resuming_after_a_subagent_sees_its_files(
    saver: tuple[str, str], blobs: str
) -> None:
    """Killed right after the subagent's ``task`` call returned: the parent's next call runs in a
    new process and finds the subagent's last record (filed under the ``task`` call)."""
    thread = Thread(saver, blobs, "--subagent")
    thread.kill_when_blocked("--message", "go", "--block-at-turn", "2")
    resumed = thread.run()
    assert BOTH in resumed["tools"][-1], resumed["tools"]
    assert "[notice] The sandbox was restored from the snapshot" in resumed["tools"][-1]


def test_a_subagent_started_in_a_new_process_sees_the_parent_s_files(
    saver: tuple[str, str], blobs: str
) -> None:
    """Killed before the ``task`` call: the subagent starts in a new process, with no sandbox
    alive; it continues from the parent's record, so the parent's file is still there."""
    thread = Thread(saver, blobs, "--subagent")
    thread.kill_when_blocked("--message", "go", "--block-at-turn", "1")
    resumed = thread.run()
    assert BOTH in resumed["tools"][-1], resumed["tools"]


def test_a_subagent_killed_midway_resumes_in_a_new_process(
    saver: tuple[str, str], blobs: str
) -> None:
    """Killed after the subagent's ``write_file``, before its ``execute``: LangGraph re-runs the
    ``task`` call in the new process; the subagent finds the file it wrote, and the parent
    both files."""
    thread = Thread(saver, blobs, "--subagent")
    thread.kill_when_blocked("--message", "go", "--block-subagent-at-turn", "1")
    resumed = thread.run()
    assert _shown(resumed) == BOTH.rstrip(), resumed["tools"]  # the subagent's work, once


def test_a_subagent_in_a_fork_starts_from_the_fork_s_files(tmp_path: Path) -> None:
    """A fork from before the ``task`` call delegates again: its subagent starts from the
    fork's record (the parent's file), not from the live sandbox the first branch's subagent
    left (with the report), though both branches' model messages reuse the same ids."""
    from deep_agent_worker import subagent_script
    from deepagents import create_deep_agent
    from langchain_core.messages import HumanMessage

    from langchain_sandbox.deepagents import SandboxBackend
    from langchain_sandbox.runtime import SandboxRuntime
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
    from langchain_sandbox.testing import ScriptedToolModel, call

    look = "SUBTASK: look around"
    main = subagent_script()

    def script(messages: list[Any]) -> Any:
        humans = [m.text for m in messages if isinstance(m, HumanMessage)]
        answered = messages[-1].type == "tool"
        if humans[0] == look:
            # The subagent answers with what it saw: the parent's task message shows it.
            return str(messages[-1].text) if answered else call("execute", command="ls /home/user")
        if humans[-1] == "fork":
            return (
                "forked"
                if answered
                else call("task", description=look, subagent_type="general-purpose")
            )
        return main(messages)

    store = LocalDirectoryBlobStore(tmp_path / "blobs")
    options = {"base_dir": tmp_path / "s"}
    with SandboxRuntime("local", provider_options=options, snapshotter=Snapshotter(store)) as rt:
        agent = create_deep_agent(
            ScriptedToolModel(script=script),
            backend=SandboxBackend(runtime=rt),
            checkpointer=InMemorySaver(),
        )
        config: Any = {"configurable": {"thread_id": "forking"}}
        first = agent.invoke({"messages": [HumanMessage("go")]}, config)
        assert BOTH in first["messages"][-2].text
        before_task = next(
            s.config
            for s in agent.get_state_history(config)
            if s.next == ("model",) and len(s.values["messages"]) == 3
        )
        fork = agent.invoke({"messages": [HumanMessage("fork")]}, before_task)
    looked = [m.text for m in fork["messages"] if m.type == "tool"][-1]
    assert fork["messages"][-1].text == "forked"
    assert "parent.txt" in looked, looked
    assert "report.txt" not in looked, looked


def test_a_replayed_task_call_keeps_each_branch_s_subagent_files(tmp_path: Path) -> None:
    """Time travel to just before the parent's ``task`` call ran replays that very call (same
    message and call ids) on a fork: its subagent stamps a file anew. Each branch's record under
    the task call names its own step, so a runtime that starts with no sandbox (what a new
    process is) and continues the *first* branch finds that branch's stamp, not the replay's."""
    from deepagents import create_deep_agent
    from langchain_core.messages import HumanMessage

    from langchain_sandbox.deepagents import SandboxBackend
    from langchain_sandbox.runtime import SandboxRuntime
    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
    from langchain_sandbox.testing import ScriptedToolModel, call

    stamp = "SUBTASK: stamp the run"
    path = "/home/user/stamp.txt"
    show = call("execute", command=f"cat {path}")

    def script(messages: list[Any]) -> Any:
        humans = [m.text for m in messages if isinstance(m, HumanMessage)]
        answered = messages[-1].type == "tool"
        if humans[0] == stamp:
            return "stamped" if answered else call("execute", command=f"date +%s%N > {path}")
        if humans[-1] == "show":
            return "shown" if answered else show
        return (
            "delegated"
            if answered
            else call("task", description=stamp, subagent_type="general-purpose")
        )

    def shown(result: dict[str, Any]) -> str:
        """The stamp ``cat`` printed (the tool message also holds notices and the exit line)."""
        text = str([m.text for m in result["messages"] if m.type == "tool"][-1])
        return next(line for line in text.splitlines() if line.isdigit())

    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "replayed-task"}}

    def agent(runtime: SandboxRuntime) -> Any:
        model = ScriptedToolModel(script=script)
        return create_deep_agent(model, backend=SandboxBackend(runtime=runtime), checkpointer=saver)

    def runtime(name: str) -> SandboxRuntime:
        store = LocalDirectoryBlobStore(tmp_path / "blobs")
        options = {"base_dir": tmp_path / name}
        return SandboxRuntime("local", provider_options=options, snapshotter=Snapshotter(store))

    with runtime("first") as rt:
        first_agent = agent(rt)
        first_agent.invoke({"messages": [HumanMessage("go")]}, config)
        first_end = first_agent.get_state(config).config
        first_stamp = shown(first_agent.invoke({"messages": [HumanMessage("show")]}, first_end))
        before_tools = next(
            s.config
            for s in first_agent.get_state_history(config)
            if s.next == ("tools",) and s.values["messages"][-1].tool_calls[0]["name"] == "task"
        )
        first_agent.invoke(None, before_tools)  # the replay: the same task call, run again
        replay_end = first_agent.get_state(config).config
        replay_stamp = shown(first_agent.invoke({"messages": [HumanMessage("show")]}, replay_end))
    assert first_stamp != replay_stamp, (first_stamp, replay_stamp)

    with runtime("fresh") as rt:
        again = shown(agent(rt).invoke({"messages": [HumanMessage("show")]}, first_end))
    assert again == first_stamp, (again, first_stamp, replay_stamp)
