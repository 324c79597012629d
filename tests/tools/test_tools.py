"""The sandbox tools on the real local provider: outside a graph, in a ToolNode graph, sync and
async, with bad input, timeouts, crashes, images and streaming."""

from __future__ import annotations

import base64
import uuid
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest
from langchain_core.messages import AIMessage, ToolMessage
from langchain_core.tools import BaseTool
from langgraph.graph import START, StateGraph
from langgraph.prebuilt import ToolNode

from langchain_sandbox.graph.channel import SandboxGraphState
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.tools import (
    SandboxExecTool,
    SandboxInstallPackagesTool,
    SandboxListFilesTool,
    SandboxReadFileTool,
    SandboxShellTool,
    SandboxToolkit,
    SandboxWriteFileTool,
)
from langchain_sandbox.tools.base import OUTPUT_EVENT, execution_result, resolve_runtime

from .conftest import make_local_runtime


def _call(tool: BaseTool, args: dict[str, Any], thread: str = "t1") -> ToolMessage:
    """Invoke with a full ToolCall (as a ToolNode does) so the artifact comes back too."""
    message = tool.invoke(
        {"name": tool.name, "args": args, "id": uuid.uuid4().hex, "type": "tool_call"},
        {"configurable": {"thread_id": thread}},
    )
    assert isinstance(message, ToolMessage)
    return message


def _text(message: ToolMessage) -> str:
    if isinstance(message.content, str):
        return message.content
    return "\n".join(b["text"] for b in message.content if isinstance(b, dict) and "text" in b)


def test_plain_invoke_returns_content_and_keeps_state(runtime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=runtime)
    assert "2" in tool.invoke({"code": "counter = 1 + 1\nprint(counter)"})
    out = tool.invoke({"code": "counter * 21"})
    assert "value:\n42" in out


async def test_async_invoke_shares_the_sync_state(aruntime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=aruntime)
    await tool.ainvoke({"code": "word = 'sandbox'"})
    assert "SANDBOX" in tool.invoke({"code": "print(word.upper())"})
    assert "7" in await tool.ainvoke({"code": "print(len(word))"})


def test_tool_call_artifact_carries_result_and_record(runtime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=runtime)
    first = _call(tool, {"code": "print('hi')"})
    second = _call(tool, {"code": "1 / 0"})
    assert first.artifact["result"]["stdout"] == "hi\n"
    record = second.artifact["sandbox"]
    assert record["revision"] == first.artifact["sandbox"]["revision"] + 1
    # Outside a graph nothing can resume from the record, so it names no snapshot
    # (test_persist_rule.py covers when one is taken).
    assert record.get("snapshot") is None
    assert record["session"]["provider"] == "local"
    assert record["exec_count"] == 1
    # A user-code failure is a result the model reads, not an error.
    assert second.status == "success"
    assert "ZeroDivisionError" in _text(second)
    assert second.artifact["result"]["error"]["name"] == "ZeroDivisionError"


def test_shell_and_file_tools_share_one_workspace(runtime: SandboxRuntime) -> None:
    tools = {t.name: t for t in SandboxToolkit(runtime=runtime).get_tools()}
    wrote = _call(tools["sandbox_write_file"], {"path": "data/in.txt", "content": "a\nb\nc\n"})
    assert "Wrote 6 bytes to /home/user/data/in.txt" in _text(wrote)
    counted = _call(tools["sandbox_shell"], {"command": "wc -l < in.txt", "cwd": "data"})
    assert counted.artifact["result"]["stdout"].strip() == "3"
    _call(tools["sandbox_exec"], {"code": "open('data/out.txt', 'w').write('from python')"})
    listing = _text(_call(tools["sandbox_list_files"], {"path": "data"}))
    assert "in.txt" in listing
    assert "out.txt" in listing
    assert _text(_call(tools["sandbox_read_file"], {"path": "data/out.txt"})) == "from python"


def test_the_shell_tool_keeps_cd_and_export_between_calls(runtime: SandboxRuntime) -> None:
    shell = SandboxShellTool(runtime=runtime)
    _call(shell, {"command": "mkdir -p src && cd src && export BUILD=release"})
    later = _call(shell, {"command": 'pwd; echo "$BUILD"'})
    assert later.artifact["result"]["stdout"] == "/home/user/src\nrelease\n"
    assert "cd" in shell.description
    assert "do not carry over" not in shell.description


def test_binary_and_image_files_are_not_dumped_as_text(runtime: SandboxRuntime) -> None:
    write = SandboxWriteFileTool(runtime=runtime)
    read = SandboxReadFileTool(runtime=runtime)
    png = base64.b64decode(
        "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR42mP8z8BQDwAEhQGAhKmMIQAAAABJRU5ErkJggg=="
    )
    _call(
        write, {"path": "pic.png", "content": base64.b64encode(png).decode(), "encoding": "base64"}
    )
    _call(
        write,
        {
            "path": "blob.bin",
            "content": base64.b64encode(b"\x00\x01\xff").decode(),
            "encoding": "base64",
        },
    )
    image = _call(read, {"path": "pic.png"})
    # Called outside a graph, no model can be told: the image is kept in the artifact, the
    # content is text any chat API takes, with a note saying where the image is.
    assert isinstance(image.content, str)
    assert "pic.png (image/png, " in image.content
    assert "1 image not shown in this tool result" in image.content
    [kept] = image.artifact["result"]["images"]
    assert kept["type"] == "image"
    assert kept["mime_type"] == "image/png"
    assert base64.b64decode(kept["base64"]) == png
    binary = _call(read, {"path": "blob.bin"})
    assert "binary file of 3 bytes" in _text(binary)


def test_matplotlib_figure_comes_back_in_the_artifact(runtime: SandboxRuntime) -> None:
    """Outside a graph the calling model is unknown: the figure is in the artifact (the whole
    result, data included, rebuilt by ``execution_result``), the content is text."""
    message = _call(
        SandboxExecTool(runtime=runtime),
        {
            "code": (
                "import matplotlib\nmatplotlib.use('Agg')\nimport matplotlib.pyplot as plt\n"
                "plt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"
            )
        },
    )
    assert isinstance(message.content, str), message.content
    assert "[artifact] figure-1.png (image/png)" in message.content
    assert "1 image not shown in this tool result" in message.content
    [image] = message.artifact["result"]["images"]
    figure = execution_result(message).artifacts[0]
    assert figure.data == image["base64"]
    assert figure.to_bytes().startswith(b"\x89PNG\r\n\x1a\n")


def test_bad_input_is_a_clear_message_and_the_thread_stays_usable(runtime: SandboxRuntime) -> None:
    tools = {t.name: t for t in SandboxToolkit(runtime=runtime).get_tools()}
    _call(tools["sandbox_exec"], {"code": "alive = True"})
    escape = _call(tools["sandbox_read_file"], {"path": "../../etc/passwd"})
    assert escape.status == "error"
    assert "'..'" in _text(escape)
    absolute = _call(tools["sandbox_write_file"], {"path": "/etc/evil", "content": "x"})
    assert absolute.status == "error"
    assert "outside the workspace" in _text(absolute)
    missing = _call(tools["sandbox_read_file"], {"path": "nope.txt"})
    assert missing.status == "error"
    injected = _call(tools["sandbox_install_packages"], {"packages": ["numpy; rm -rf /"]})
    assert injected.status == "error"
    assert "not a package requirement" in _text(injected)
    bad_b64 = _call(
        tools["sandbox_write_file"], {"path": "x", "content": "!!", "encoding": "base64"}
    )
    assert "not valid base64" in _text(bad_b64)
    assert "True" in _text(_call(tools["sandbox_exec"], {"code": "alive"}))


def test_timeout_and_crash_leave_the_thread_usable(runtime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=runtime)
    _call(tool, {"code": "kept = 'files too'\nopen('kept.txt', 'w').write(kept)"})
    timed_out = _call(tool, {"code": "import time\nwhile True: time.sleep(0.1)", "timeout": 1})
    assert timed_out.artifact["result"]["timed_out"] is True
    assert "timed out" in _text(timed_out)
    assert "files too" in _text(_call(tool, {"code": "print(kept)"}))

    crashed = _call(tool, {"code": "import os\nos._exit(3)"})
    assert crashed.status == "success"
    after = _call(tool, {"code": "print(open('kept.txt').read())"})
    assert "files too" in _text(after)


def test_two_threads_get_two_sandboxes(runtime: SandboxRuntime) -> None:
    shell = SandboxShellTool(runtime=runtime)
    _call(shell, {"command": "echo secret > only-a.txt"}, thread="a")
    seen_by_b = _call(shell, {"command": "ls -a /home/user"}, thread="b")
    assert "only-a.txt" not in _text(seen_by_b)
    assert "only-a.txt" in _text(_call(shell, {"command": "ls"}, thread="a"))
    assert set(runtime.live_sessions()) == {"a", "b"}
    assert len(set(runtime.live_sessions().values())) == 2


def test_install_packages_reports_what_happened(runtime: SandboxRuntime) -> None:
    message = _call(SandboxInstallPackagesTool(runtime=runtime), {"packages": ["six"]})
    # Without network the install fails; either way it is a result the model can read.
    assert message.status == "success"
    assert message.artifact["result"]["kind"] == "command"


# -- resolution ---------------------------------------------------------------------------


class _Context:
    def __init__(self, runtime: SandboxRuntime) -> None:
        self.sandbox_runtime = runtime


def _graph(tools: list[BaseTool], **node_kwargs: Any) -> Any:
    builder = StateGraph(SandboxGraphState, context_schema=_Context)
    builder.add_node("tools", ToolNode(tools, **node_kwargs))
    builder.add_edge(START, "tools")
    return builder.compile()


def _ask(tool_name: str, args: dict[str, Any], call_id: str = "call-1") -> dict[str, Any]:
    return {
        "messages": [
            AIMessage(
                content="",
                tool_calls=[{"name": tool_name, "args": args, "id": call_id, "type": "tool_call"}],
            )
        ]
    }


def test_resolution_order(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    explicit = make_local_runtime(tmp_path / "explicit")
    in_context = make_local_runtime(tmp_path / "context")
    configured = make_local_runtime(tmp_path / "configured")
    from langchain_sandbox import runtime as runtime_module

    try:
        code = {"code": "print('which')"}
        config = {"configurable": {"thread_id": "r", "sandbox_runtime": configured}}

        # explicit beats context and configurable
        _graph([SandboxExecTool(runtime=explicit)]).invoke(
            _ask("sandbox_exec", code), config, context=_Context(in_context)
        )
        assert "r" in explicit.live_sessions()
        assert not in_context.live_sessions()

        # context beats configurable (the ToolNode's ToolRuntime.context)
        _graph([SandboxExecTool()]).invoke(
            _ask("sandbox_exec", code), config, context=_Context(in_context)
        )
        assert "r" in in_context.live_sessions()
        assert not configured.live_sessions()

        # a dict context works too
        found = resolve_runtime(
            None, SimpleNamespace(context={"sandbox_runtime": explicit}), config
        )
        assert found is explicit

        # configurable is used when there is no context
        SandboxExecTool().invoke(code, config)
        assert "r" in configured.live_sessions()

        # nothing given: the process-wide default runtime, on the tool's private thread
        monkeypatch.setattr(runtime_module, "_default_runtime", None)
        unbound = SandboxExecTool()
        unbound.invoke(code)
        default = runtime_module.get_default_runtime()
        assert list(default.live_sessions()) == [unbound.default_thread_id]
        assert default.provider_name == "local"
    finally:
        for made in (explicit, in_context, configured):
            made.close()
        if runtime_module._default_runtime is not None:
            runtime_module._default_runtime.close()


def test_tool_node_reads_the_record_and_streams_output(runtime: SandboxRuntime) -> None:
    graph = _graph([SandboxExecTool(runtime=runtime)])
    config = {"configurable": {"thread_id": "g"}}
    code = "import time\nfor i in range(3):\n    print('tick', i, flush=True)\n    time.sleep(0.2)"
    chunks = list(
        graph.stream(
            _ask("sandbox_exec", {"code": code}), config, stream_mode=["custom", "updates"]
        )
    )
    custom = [c for mode, c in chunks if mode == "custom"]
    updates = [i for i, (mode, _) in enumerate(chunks) if mode == "updates"]
    assert custom, "no output was streamed"
    assert all(c["type"] == OUTPUT_EVENT and c["tool_call_id"] == "call-1" for c in custom)
    assert "tick 0" in "".join(c["text"] for c in custom)
    first_custom = next(i for i, (mode, _) in enumerate(chunks) if mode == "custom")
    assert first_custom < updates[-1], "output arrived only after the tool finished"

    # The ToolNode's state carries a stale record: a fork re-running the same call id from the
    # previous state rewinds the live sandbox to that state (instead of running on as it is).
    # The two steps stand for those of a checkpointed thread (resumable), so they are captured.
    first = runtime.run_code("g", "marker = 'first'", resumable=True)
    live_before = runtime.live_sessions()["g"]
    runtime.run_code("g", "marker = 'second'", resumable=True)
    state = {
        **_ask("sandbox_exec", {"code": "print(marker)"}, call_id="fork"),
        "sandbox": first.record,
    }
    result = graph.invoke(state, config)
    message = result["messages"][-1]
    assert "first" in _text(message)
    assert "restored" in _text(message)
    assert runtime.live_sessions()["g"] == live_before, "rewound in place, not replaced"


async def test_async_graph_streams_and_runs(aruntime: SandboxRuntime) -> None:
    graph = _graph([SandboxExecTool(runtime=aruntime)])
    config = {"configurable": {"thread_id": "ag"}}
    seen = [
        chunk
        async for mode, chunk in graph.astream(
            _ask("sandbox_exec", {"code": "print('async hello')"}),
            config,
            stream_mode=["custom", "values"],
        )
        if mode == "custom"
    ]
    assert any("async hello" in c["text"] for c in seen)


def test_toolkit_shares_one_runtime_and_filters(tmp_path: Path) -> None:
    toolkit = SandboxToolkit(provider="local", provider_options={"base_dir": tmp_path / "s"})
    tools = toolkit.get_tools()
    assert {t.name for t in tools} == {
        "sandbox_exec",
        "sandbox_shell",
        "sandbox_write_file",
        "sandbox_read_file",
        "sandbox_list_files",
        "sandbox_install_packages",
        "sandbox_process",
    }
    runtimes = {id(t.runtime) for t in tools}  # type: ignore[attr-defined]
    assert len(runtimes) == 1
    assert [t.name for t in SandboxToolkit(include=["sandbox_exec"]).get_tools()] == [
        "sandbox_exec"
    ]
    with pytest.raises(ValueError, match="Unknown sandbox tools"):
        SandboxToolkit(include=["rm_rf"]).get_tools()
    tools[0].runtime.close()  # type: ignore[attr-defined]


def test_description_and_schema_hide_the_injected_runtime() -> None:
    for tool in SandboxToolkit().get_tools():
        schema = tool.tool_call_schema.model_json_schema()  # type: ignore[union-attr]
        assert "runtime" not in schema["properties"]
        assert len(tool.description) > 80
    assert isinstance(SandboxListFilesTool().args_schema.model_json_schema(), dict)  # type: ignore[union-attr]


def test_parallel_calls_of_one_message_share_the_sandbox(runtime: SandboxRuntime) -> None:
    """ToolNode runs the two calls in parallel threads; both carry the same (stale) record."""
    graph = _graph([SandboxExecTool(runtime=runtime)])
    config = {"configurable": {"thread_id": "p"}}
    setup = graph.invoke(_ask("sandbox_exec", {"code": "seen = []"}, call_id="setup"), config)
    calls = [
        {
            "name": "sandbox_exec",
            "args": {"code": f"seen.append({i})\nlen(seen)"},
            "id": f"c{i}",
            "type": "tool_call",
        }
        for i in range(2)
    ]
    state = {
        "messages": [*setup["messages"], AIMessage(content="", tool_calls=calls)],
        "sandbox": setup["messages"][-1].artifact["sandbox"],
    }
    result = graph.invoke(state, config)
    replies = [
        m
        for m in result["messages"]
        if isinstance(m, ToolMessage) and m.tool_call_id in ("c0", "c1")
    ]
    assert sorted(m.artifact["result"]["value"] for m in replies) == ["1", "2"]
    assert all(not m.artifact["result"]["notices"] for m in replies), "no restore between siblings"
    assert len(runtime.live_sessions()) == 1
    after = runtime.run_code(
        "p",
        "sorted(seen)",
        record=max((m.artifact["sandbox"] for m in replies), key=lambda r: r["revision"]),
    )
    assert after.value.value == "[0, 1]"


def test_huge_output_is_capped_and_the_thread_stays_usable(runtime: SandboxRuntime) -> None:
    tool = SandboxExecTool(runtime=runtime)
    flood = _call(
        tool, {"code": "import sys\nfor _ in range(200):\n    sys.stdout.write('x' * 100_000)"}
    )
    assert len(_text(flood)) < 50_000
    assert "cut" in _text(flood) or "truncated" in _text(flood)
    assert "ok" in _text(_call(tool, {"code": "print('ok')"}))


def test_a_closed_runtime_is_a_message_not_a_crash(tmp_path: Path) -> None:
    closed = make_local_runtime(tmp_path)
    closed.close()
    message = _call(SandboxExecTool(runtime=closed), {"code": "print(1)"})
    assert message.status == "error"
    assert "closed" in _text(message)


def test_a_provider_tool_builds_one_runtime_under_concurrent_calls(tmp_path: Path) -> None:
    from concurrent.futures import ThreadPoolExecutor

    tool = SandboxExecTool(provider="local", provider_options={"base_dir": tmp_path / "s"})

    def _call_in(thread: str) -> str:
        return str(tool.invoke({"code": "print('hi')"}, {"configurable": {"thread_id": thread}}))

    with ThreadPoolExecutor(4) as pool:
        outputs = list(pool.map(_call_in, ["a", "b", "c", "d"]))
    assert all("hi" in o for o in outputs)
    built = tool._explicit_runtime()
    assert built is not None
    try:
        assert set(built.live_sessions()) == {"a", "b", "c", "d"}
    finally:
        built.close()


def test_a_tool_called_inside_a_plain_node_finds_the_graph_context(tmp_path: Path) -> None:
    """No ToolNode, so no ToolRuntime: the runtime comes from ``get_runtime().context``."""
    from typing import TypedDict

    in_context = make_local_runtime(tmp_path)

    class _State(TypedDict):
        out: str

    def _node(state: _State) -> _State:
        return {"out": str(SandboxExecTool().invoke({"code": "print('from a node')"}))}

    builder = StateGraph(_State, context_schema=_Context)
    builder.add_node("run", _node)
    builder.add_edge(START, "run")
    try:
        result = builder.compile().invoke(
            {"out": ""}, {"configurable": {"thread_id": "n"}}, context=_Context(in_context)
        )
        assert "from a node" in result["out"]
        assert "n" in in_context.live_sessions()
    finally:
        in_context.close()


def test_a_tool_closes_the_runtime_it_built_and_only_that() -> None:
    from langchain_sandbox import SandboxExecTool, SandboxRuntime

    own = SandboxExecTool(provider="local")
    assert "1" in str(own.invoke({"code": "1"}))
    built = own._explicit_runtime()
    assert built is not None
    assert built.live_sessions()
    own.close()
    assert built.closed
    own.close()

    shared = SandboxRuntime()
    try:
        tool = SandboxExecTool(runtime=shared)
        tool.invoke({"code": "2"})
        tool.close()
        assert not shared.closed
    finally:
        shared.close()
