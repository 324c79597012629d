"""Sandbox output streams while it is produced, to both places LangChain and LangGraph users look:
``astream_events(version="v2")`` (custom events of the tool's run) and ``stream_mode="custom"``
(LangGraph's stream writer); ``sandbox_install_packages`` streams pip's output too. All on the real
local provider."""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path
from typing import Any
from uuid import UUID

import pytest
from langchain_core.callbacks import BaseCallbackHandler
from langchain_core.messages import AIMessage
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode

from langchain_sandbox.graph.channel import SandboxGraphState
from langchain_sandbox.providers.local import LocalProvider, PackageIndex
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
from langchain_sandbox.tools import (
    SandboxExecTool,
    SandboxInstallPackagesTool,
    SandboxShellTool,
)
from langchain_sandbox.tools.base import OUTPUT_EVENT, SandboxTool

_TICKS = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.3)"
_SHELL_TICKS = "for i in 0 1 2; do echo tick $i; sleep 0.3; done"


@pytest.fixture
def offline_runtime(tmp_path: Path) -> Iterator[SandboxRuntime]:
    """A local runtime whose pip may only look in an empty wheel directory (no network)."""
    wheels = tmp_path / "wheels"
    wheels.mkdir()
    provider = LocalProvider(
        base_dir=tmp_path / "sessions",
        package_index=PackageIndex(find_links=(wheels,), no_index=True),
    )
    runtime = SandboxRuntime(
        provider, snapshotter=Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    )
    try:
        yield runtime
    finally:
        runtime.close()


def _graph(tool: SandboxTool) -> Any:
    builder = StateGraph(SandboxGraphState)
    builder.add_node("tools", ToolNode([tool]))
    builder.add_edge(START, "tools")
    return builder.compile()


def _ask(tool: SandboxTool, args: dict[str, Any]) -> dict[str, Any]:
    call = {"name": tool.name, "args": args, "id": "call-1", "type": "tool_call"}
    return {"messages": [AIMessage(content="", tool_calls=[call])]}


@pytest.mark.parametrize(
    ("tool_class", "args"),
    [(SandboxExecTool, {"code": _TICKS}), (SandboxShellTool, {"command": _SHELL_TICKS})],
)
async def test_output_appears_in_astream_events_while_the_tool_runs(
    offline_runtime: SandboxRuntime, tool_class: type[SandboxTool], args: dict[str, Any]
) -> None:
    tool = tool_class(runtime=offline_runtime)
    events = [
        event
        async for event in _graph(tool).astream_events(
            _ask(tool, args), {"configurable": {"thread_id": "events"}}, version="v2"
        )
    ]
    kinds = [(e["event"], e["name"]) for e in events]
    output = [e for e in events if e["event"] == "on_custom_event" and e["name"] == OUTPUT_EVENT]
    assert output, f"no sandbox output event among {kinds}"
    tool_start = kinds.index(("on_tool_start", tool.name))
    tool_end = kinds.index(("on_tool_end", tool.name))
    # Each chunk is an event of the tool's own run, between its start and its end, in order,
    # once: together they are exactly the output the tool returned.
    assert all(tool_start < events.index(e) < tool_end for e in output)
    tool_run = events[tool_start]["run_id"]
    assert all(e["run_id"] == tool_run for e in output)
    assert all(e["data"]["tool_call_id"] == "call-1" for e in output)
    assert all(e["data"]["thread_id"] == "events" for e in output)
    streamed = "".join(e["data"]["text"] for e in output if e["data"]["stream"] == "stdout")
    assert streamed == "tick 0\ntick 1\ntick 2\n"
    assert events[tool_end]["data"]["output"].artifact["result"]["stdout"] == streamed


def test_install_packages_streams_pip_to_the_custom_stream(
    offline_runtime: SandboxRuntime,
) -> None:
    tool = SandboxInstallPackagesTool(runtime=offline_runtime)
    chunks = list(
        _graph(tool).stream(
            _ask(tool, {"packages": ["surely-not-a-package"]}),
            {"configurable": {"thread_id": "pip"}},
            stream_mode=["custom", "updates"],
        )
    )
    custom = [c for mode, c in chunks if mode == "custom"]
    assert custom, "pip's output was not streamed"
    assert all(c["type"] == OUTPUT_EVENT and c["tool_call_id"] == "call-1" for c in custom)
    streamed = "".join(c["text"] for c in custom)
    assert "surely-not-a-package" in streamed
    modes = [mode for mode, _ in chunks]
    assert modes.index("custom") < modes.index("updates"), "output came only after the tool"
    [update] = [c for mode, c in chunks if mode == "updates"]
    result = update["tools"]["messages"][-1].artifact["result"]
    assert result["exit_code"] != 0
    for stream in ("stdout", "stderr"):
        assert "".join(c["text"] for c in custom if c["stream"] == stream) == result[stream]


async def test_install_packages_streams_pip_to_astream_events(
    offline_runtime: SandboxRuntime,
) -> None:
    tool = SandboxInstallPackagesTool(runtime=offline_runtime)
    output = [
        event["data"]["text"]
        async for event in _graph(tool).astream_events(
            _ask(tool, {"packages": ["surely-not-a-package"]}),
            {"configurable": {"thread_id": "pip-events"}},
            version="v2",
        )
        if event["event"] == "on_custom_event" and event["name"] == OUTPUT_EVENT
    ]
    assert "surely-not-a-package" in "".join(output)


class _Recorder(BaseCallbackHandler):
    def __init__(self) -> None:
        self.events: list[tuple[str, dict[str, Any], UUID]] = []

    def on_custom_event(
        self,
        name: str,
        data: Any,
        *,
        run_id: UUID,
        tags: Any = None,
        metadata: Any = None,
        **kwargs: Any,
    ) -> None:
        self.events.append((name, data, run_id))


def test_a_sync_call_reaches_callback_handlers(offline_runtime: SandboxRuntime) -> None:
    recorder = _Recorder()
    tool = SandboxShellTool(runtime=offline_runtime)
    tool.invoke({"command": "echo one; echo two >&2"}, {"callbacks": [recorder]})
    received = [(data["stream"], data["text"]) for name, data, _ in recorder.events]
    assert all(name == OUTPUT_EVENT for name, _, _ in recorder.events)
    assert "".join(t for s, t in received if s == "stdout") == "one\n"
    assert "".join(t for s, t in received if s == "stderr") == "two\n"
