"""No blocking call on an event loop, on any async path of the package.

LangGraph Server (``langgraph dev``) runs graphs on its event loop with ``blockbuster`` armed and
fails a run at the first blocking call. These tests arm the same library, stricter than the
server (every function it knows, ``os.stat``, file reads and writes and contended locks
included), for calls made from this package's code, on every thread that runs a loop: the
caller's and the runtime's own. Each scenario is a real async path: the default runtime built
lazily inside a run, the local provider with snapshots and a restore in a fresh runtime, the
tools outside a graph, ``SandboxToolNode``, the E2B, Runloop and Kubernetes providers through
their SDKs, and the LangGraph-store blob store.
"""

from __future__ import annotations

import asyncio
import threading
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
from blockbuster import BlockBuster
from langchain.agents import create_agent
from langgraph.checkpoint.memory import InMemorySaver
from langgraph.store.memory import InMemoryStore

import langchain_sandbox.runtime as runtime_module
from langchain_sandbox import (
    LangGraphStoreBlobStore,
    LocalDirectoryBlobStore,
    SandboxExecTool,
    SandboxMiddleware,
    SandboxRuntime,
    Snapshotter,
)
from langchain_sandbox.providers.kubernetes.provider import KubernetesProvider
from langchain_sandbox.testing import ScriptedToolModel, call
from langchain_sandbox.testing.e2b_emulator import E2BEmulator
from langchain_sandbox.testing.kubernetes_emulator import KubernetesEmulator
from langchain_sandbox.testing.runloop_emulator import RunloopEmulator

FIGURE = "import matplotlib.pyplot as plt\nplt.plot([1, 3, 2])\nplt.show()"


@pytest.fixture
def blockbuster() -> Iterator[BlockBuster]:
    """Raise ``BlockingError`` at any blocking call made (directly or not) by the package's code
    on a thread running an event loop. The emulators are test infrastructure, not the package."""
    detector = BlockBuster(
        scanned_modules=["langchain_sandbox"], excluded_modules=["langchain_sandbox.testing"]
    )
    detector.activate()
    try:
        yield detector
    finally:
        detector.deactivate()


@pytest.fixture
def fresh_default_runtime(monkeypatch: pytest.MonkeyPatch) -> Iterator[None]:
    """Make the next ``get_default_runtime()`` build a new runtime (inside the test's loop)."""
    monkeypatch.setattr(runtime_module, "_default_runtime", None)
    yield
    made = runtime_module._default_runtime
    if made is not None:
        made.close()


def _runs_user_code() -> ScriptedToolModel:
    """Runs each user message as Python, then answers with what the sandbox said."""
    return ScriptedToolModel(
        script=lambda messages: (
            call("sandbox_exec", code=str(messages[-1].text))
            if messages[-1].type == "human"
            else str(messages[-1].text)
        )
    )


def _thread() -> dict[str, Any]:
    return {"configurable": {"thread_id": f"bb-{uuid.uuid4().hex[:8]}"}}


async def test_agent_on_the_default_runtime_never_blocks_the_loop(
    fresh_default_runtime: None, blockbuster: BlockBuster
) -> None:
    """The path ``langgraph dev`` failed on: the default runtime built inside
    ``abefore_agent``, then every tool, a chart, and a second run of the thread."""
    agent = create_agent(
        _runs_user_code(), middleware=[SandboxMiddleware()], checkpointer=InMemorySaver()
    )
    config = _thread()
    await agent.ainvoke({"messages": [{"role": "user", "content": "x = 41\n" + FIGURE}]}, config)
    second = await agent.ainvoke({"messages": [{"role": "user", "content": "x + 1"}]}, config)
    assert "42" in second["messages"][-2].text

    tools = ScriptedToolModel(
        script=[
            call("sandbox_write_file", path="notes/a.txt", content="hello"),
            call("sandbox_read_file", path="notes/a.txt"),
            call("sandbox_list_files", path="notes"),
            call("sandbox_shell", command="cat notes/a.txt"),
            "done",
        ]
    )
    agent = create_agent(tools, middleware=[SandboxMiddleware()], checkpointer=InMemorySaver())
    result = await agent.ainvoke({"messages": [{"role": "user", "content": "go"}]}, _thread())
    assert result["messages"][-2].text.endswith("hello")


async def test_restore_in_a_fresh_runtime_and_release_never_block_the_loop(
    tmp_path: Path, blockbuster: BlockBuster
) -> None:
    """Snapshots written, then restored by another runtime (a new process), then released."""
    saver = InMemorySaver()
    config = _thread()

    def build(runtime: SandboxRuntime) -> Any:
        middleware = SandboxMiddleware(runtime=runtime, release_between_turns=True)
        return create_agent(_runs_user_code(), middleware=[middleware], checkpointer=saver)

    blobs = tmp_path / "blobs"
    first = SandboxRuntime(snapshotter=Snapshotter(LocalDirectoryBlobStore(blobs)))
    code = "y = 'kept'\nopen('f.txt', 'w').write('on disk')"
    await build(first).ainvoke({"messages": [{"role": "user", "content": code}]}, config)
    await first.aclose()

    second = SandboxRuntime(snapshotter=Snapshotter(LocalDirectoryBlobStore(blobs)))
    code = "print(y, open('f.txt').read())"
    result = await build(second).ainvoke({"messages": [{"role": "user", "content": code}]}, config)
    assert "kept on disk" in result["messages"][-2].text
    await second.aclose_thread(config["configurable"]["thread_id"])
    await second.aclose()


async def test_tool_outside_a_graph_never_blocks_the_loop(blockbuster: BlockBuster) -> None:
    tool = SandboxExecTool(provider="local")
    try:
        message = await tool.ainvoke(
            {"type": "tool_call", "id": "c1", "name": "sandbox_exec", "args": {"code": FIGURE}}
        )
        assert message.artifact["result"]["artifacts"]
    finally:
        await tool.aclose()


@pytest.fixture
def e2b() -> Iterator[E2BEmulator]:
    with E2BEmulator(api_key="e2b_fake_key") as running:
        yield running


@pytest.fixture
def runloop(monkeypatch: pytest.MonkeyPatch) -> Iterator[RunloopEmulator]:
    monkeypatch.delenv("RUNLOOP_BASE_URL", raising=False)
    with RunloopEmulator(api_key="rl_fake_key") as running:
        yield running


async def test_e2b_and_runloop_through_their_sdks_never_block_the_loop(
    e2b: E2BEmulator, runloop: RunloopEmulator, blockbuster: BlockBuster
) -> None:
    """Runtimes built by provider name inside the loop: the provider (its SDK import, its
    clients) is built off the loop, and calls, snapshots and close go through the real SDKs.
    (The emulators start before the detector: they are test infrastructure.)"""
    store = LangGraphStoreBlobStore(InMemoryStore())
    options = {"api_key": "e2b_fake_key", "api_url": e2b.url, "sandbox_url": e2b.url}
    # Snapshots after every call (no graph runs here, so the default would take none).
    async with SandboxRuntime(
        "e2b", provider_options=options, snapshotter=Snapshotter(store), persist="every_call"
    ) as runtime:
        assert (await runtime.arun_code("t", "z = 5")).value.ok
        outcome = await runtime.arun_code("t", "z * 2")
        assert outcome.value.value == "10"
        assert outcome.record.get("snapshot")
    options = {"api_key": "rl_fake_key", "base_url": runloop.url}
    async with SandboxRuntime(
        "runloop", provider_options=options, snapshotter=Snapshotter(store), persist="every_call"
    ) as runtime:
        outcome = await runtime.arun_command("t", "echo hi > f && cat f")
        assert outcome.value.stdout == "hi\n"
        await runtime.awrite_files("t", _MANY_FILES)  # one archive, built off the loop
        listed = await runtime.arun_command("t", "find many -type f | wc -l")
        assert listed.value.stdout.strip() == str(len(_MANY_FILES))


# Enough small files that their archive is built in a thread (providers/_file_archive.py).
_MANY_FILES = {f"many/d{index % 5}/f{index}.txt": b"x" * 100 for index in range(300)}


async def test_tools_from_code_on_e2b_and_runloop_never_block_the_loop(
    e2b: E2BEmulator, runloop: RunloopEmulator, blockbuster: BlockBuster
) -> None:
    """The exec tool with host tools, on each remote provider's channel: the frames read from
    the output, the replies sent (an envd file, a ``send_std_in``), the guest modules shipped."""
    from langchain_core.tools import tool

    @tool
    def double(n: int) -> int:
        """Double n."""
        return n * 2

    for name, options in (
        ("e2b", {"api_key": "e2b_fake_key", "api_url": e2b.url, "sandbox_url": e2b.url}),
        ("runloop", {"api_key": "rl_fake_key", "base_url": runloop.url}),
    ):
        async with SandboxRuntime(name, provider_options=options) as runtime:
            exec_tool = SandboxExecTool(runtime=runtime, tools=[double])
            text = await exec_tool.ainvoke({"code": "tools.double(n=21)", "timeout": 20})
            assert "42" in str(text), text


async def test_kubernetes_through_its_sdk_never_blocks_the_loop(
    blockbuster: BlockBuster, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The Kubernetes provider through ``k8s-agent-sandbox`` and ``kubernetes_asyncio``: the
    claim, the calls, a snapshot and the close. ``kubernetes_asyncio`` loads its configuration
    with blocking file reads; the provider does that in ``_configuration`` on a worker thread,
    the one place allowed to block here. The spy makes the allowance honest: it fails the test
    if ``_configuration`` ever runs on a thread whose loop is running (the runtime's own)."""
    for function in blockbuster.functions.values():
        function.can_block_in("providers/kubernetes/provider.py", "_configuration")
    on_a_running_loop: list[str] = []
    load = KubernetesProvider._configuration

    def spy(provider: KubernetesProvider) -> Any:
        try:
            asyncio.get_running_loop()
        except RuntimeError:
            return load(provider)
        on_a_running_loop.append(threading.current_thread().name)
        return load(provider)

    monkeypatch.setattr(KubernetesProvider, "_configuration", spy)
    blockbuster.deactivate()  # the emulator is test infrastructure, started unarmed
    with KubernetesEmulator() as cluster:
        blockbuster.activate()
        store = LangGraphStoreBlobStore(InMemoryStore())
        options = {"kubeconfig": str(cluster.kubeconfig), "runtime_url": cluster.url}
        async with SandboxRuntime(
            "kubernetes",
            provider_options=options,
            snapshotter=Snapshotter(store),
            persist="every_call",
        ) as runtime:
            assert (await runtime.arun_code("t", "k = 3")).value.ok
            outcome = await runtime.arun_code("t", "k * 2")
            assert outcome.value.value == "6"
            assert outcome.record.get("snapshot")
            listed = await runtime.arun_command("t", "echo hi > f && cat f")
            assert listed.value.stdout == "hi\n"
            await runtime.awrite_files("t", _MANY_FILES)
            listed = await runtime.arun_command("t", "find many -type f | wc -l")
            assert listed.value.stdout.strip() == str(len(_MANY_FILES))
        blockbuster.deactivate()
    assert on_a_running_loop == [], on_a_running_loop
