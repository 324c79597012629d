"""One worker process of the Deep Agents durable tests: ``create_deep_agent`` with
``backend=SandboxBackend(...)`` and a checkpointer, one run, then exit (or die).

Like ``agent_worker.py`` it prints JSON lines: ``{"event": "blocked"}`` when the model reaches
``--block-at-turn`` (and hangs, to be SIGKILLed), ``{"event": "done", ...}`` at the end of a run.
The script answers from the conversation, so a new process replaying the thread picks up where
the dead one stopped (``--block-call call_0_1`` holds the second call of turn 0 mid-step instead):

* turn 0: ``cd`` + ``export`` + a file and the time of the run (``run.txt``, different in every
  run of the call) through ``execute``, and a CSV through ``write_file``, in one message (two
  parallel calls);
* turn 1: ``edit_file`` on the first file;
* turn 2: ``execute`` printing the directory, the variable and the files;
* then a final answer. A human message ``fork: <text>`` after that makes the model write
  ``<text>`` into the first file and print it; ``show`` makes it print ``run.txt``.

With ``--subagent`` the parent instead delegates (:func:`subagent_script`): turn 0 writes a file
of its own, turn 1 is a ``task`` call, whose general-purpose subagent writes
``/home/user/report.txt`` with ``write_file`` and appends to it with ``execute``; turn 2 prints
both files; then a final answer.
"""

from __future__ import annotations

import argparse
import contextlib
import time
from collections.abc import Iterator
from typing import Any

from agent_worker import emit, payload, run_config, sandbox_runtime, sync_saver
from deepagents import create_deep_agent
from langchain_core.messages import AIMessage, BaseMessage, HumanMessage, ToolMessage

from langchain_sandbox.deepagents import SandboxBackend
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call

APP = "/home/user/app"

STEPS: list[Any] = [
    [
        call(
            "execute",
            command=(
                f"mkdir -p {APP} && cd {APP} && export STAGE=one && echo first > notes.txt"
                " && date +%s%N > run.txt"
            ),
        ),
        call("write_file", file_path=f"{APP}/data.csv", content="a,b\n1,2\n"),
    ],
    call("edit_file", file_path=f"{APP}/notes.txt", old_string="first", new_string="first second"),
    call("execute", command='pwd; echo "$STAGE"; cat notes.txt data.csv run.txt'),
    "done",
]


def script_for(block_at: int | None) -> Any:
    def script(messages: list[BaseMessage]) -> Any:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        if turn == block_at:
            emit("blocked", turn=turn)
            time.sleep(3600)
        last_human = next(m for m in reversed(messages) if isinstance(m, HumanMessage))
        if last_human.text == "show":
            done = isinstance(messages[-1], ToolMessage)
            return "shown" if done else call("execute", command=f"cat {APP}/run.txt")
        if last_human.text.startswith("fork: ") and not isinstance(messages[-1], ToolMessage):
            text = last_human.text.removeprefix("fork: ")
            return call("execute", command=f"cat notes.txt; echo {text} > notes.txt; cat notes.txt")
        if last_human.text.startswith("fork: "):
            return "forked"
        return STEPS[min(turn, len(STEPS) - 1)]

    return script


REPORT = "/home/user/report.txt"
TASK = "SUBTASK: write the report"


def subagent_script(block_at: int | None = None, block_child_at: int | None = None) -> Any:
    """The parent writes a file, delegates to a subagent with ``task``, then reads both files
    (the subagent, on the same model, sees ``TASK`` as its first message). ``block_at`` holds
    the parent's model at that turn, ``block_child_at`` the subagent's."""
    parent: list[Any] = [
        call("execute", command="echo parent > /home/user/parent.txt"),
        call("task", description=TASK, subagent_type="general-purpose"),
        call("execute", command=f"cat /home/user/parent.txt {REPORT}"),
        "done",
    ]
    child: list[Any] = [
        call("write_file", file_path=REPORT, content="from the subagent\n"),
        call("execute", command=f"echo ran >> {REPORT}"),
        "report written",
    ]

    def script(messages: list[BaseMessage]) -> Any:
        turn = sum(isinstance(m, AIMessage) for m in messages)
        in_child = next(m for m in messages if isinstance(m, HumanMessage)).text == TASK
        if turn == (block_child_at if in_child else block_at):
            emit("blocked", turn=turn)
            time.sleep(3600)
        steps = child if in_child else parent
        return steps[min(turn, len(steps) - 1)]

    return script


@contextlib.contextmanager
def deep_agent(args: argparse.Namespace) -> Iterator[tuple[Any, Any]]:
    with sandbox_runtime(args) as runtime, sync_saver(args.saver, args.target) as saver:
        interrupt_on = {"execute": True} if args.approve_execute else None
        middleware = []
        if args.block_call:
            from graph_worker import _BlockCall

            # Held once the other call of its message has saved its tool message.
            middleware.append(_BlockCall(args.block_call, saver, "messages").middleware())
        script = (
            subagent_script(args.block_at_turn, args.block_subagent_at_turn)
            if args.subagent
            else script_for(args.block_at_turn)
        )
        agent = create_deep_agent(
            ScriptedToolModel(script=script),
            backend=SandboxBackend(runtime=runtime),
            checkpointer=saver,
            interrupt_on=interrupt_on,
            middleware=middleware,
        )
        yield agent, runtime


def main() -> None:
    parser = argparse.ArgumentParser()
    parser.add_argument("--saver", choices=["sqlite", "postgres"], required=True)
    parser.add_argument("--target", required=True)
    parser.add_argument("--blobs", required=True)
    parser.add_argument("--thread", required=True)
    parser.add_argument("--provider", default="local")
    parser.add_argument("--message")
    parser.add_argument("--resume", help="JSON value for Command(resume=...)")
    parser.add_argument("--checkpoint-id")
    parser.add_argument("--block-at-turn", type=int)
    parser.add_argument("--approve-execute", action="store_true")
    parser.add_argument("--block-call", help="hold this tool call of turn 0 (its id)")
    parser.add_argument("--subagent", action="store_true", help="the subagent_script story")
    parser.add_argument("--durability", default="sync", choices=["sync", "async"])
    parser.add_argument("--block-subagent-at-turn", type=int)
    args = parser.parse_args()
    with deep_agent(args) as (agent, _runtime):
        result = agent.invoke(payload(args), run_config(args), durability=args.durability)
        thread = {"configurable": {"thread_id": args.thread}}
        history = [
            {
                "id": s.config["configurable"]["checkpoint_id"],
                "next": list(s.next),
                "tools": sum(isinstance(m, ToolMessage) for m in s.values.get("messages", [])),
            }
            for s in agent.get_state_history(thread)
        ]
        messages = result.get("messages", [])
        emit(
            "done",
            tools=[m.text for m in messages if isinstance(m, ToolMessage)],
            last=messages[-1].text if messages else "",
            interrupted=bool(result.get("__interrupt__")),
            history=history,
        )


if __name__ == "__main__":
    main()
