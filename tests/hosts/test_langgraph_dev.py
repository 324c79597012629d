"""The shipped LangGraph app under the real ``langgraph dev`` server, with its default settings.

The server (langgraph-cli's in-memory LangGraph API) runs graphs on its event loop with
``blockbuster`` armed, brings its own checkpointer, and is where LangGraph apps are developed
before they are deployed. This test starts it on ``examples/langgraph_app`` (a copy, so the
server's own files land in a temporary directory), drives two runs of one thread through
``langgraph_sdk``, and checks that

* the sandbox's state carried over (a variable and a file made in run 1 are read in run 2);
* the server logged no blocking-call error (nor any other traceback);
* the ``updates`` stream has the shape of a plain ``ToolNode``'s (one dict per node);
* nothing in the server reached beyond loopback: an audit hook in the server's interpreter
  records every connection and name lookup to a non-loopback host, and telemetry, license and
  version checks are switched off through the settings the CLI documents;
* the server's saver (which keeps its checkpoints across restarts) is noted in the snapshot
  store, so another application's ``gc`` refuses to delete the blobs its threads need.
"""

from __future__ import annotations

import os
import shutil
import signal
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import forked_python
import httpx
import pytest
from langgraph_sdk import get_sync_client
from served_port import free_port

EXAMPLE = Path(__file__).resolve().parents[2] / "examples" / "langgraph_app"

_AUDIT = """
import ipaddress, os, sys

_fd = os.open(os.environ["NETWORK_AUDIT_LOG"], os.O_WRONLY | os.O_APPEND | os.O_CREAT | os.O_NONBLOCK)


def _loopback(host):
    if host in (None, "", "localhost"):
        return True
    try:
        return ipaddress.ip_address(host.split("%")[0]).is_loopback
    except ValueError:
        return False


def _hook(event, args):
    if event == "socket.connect" and isinstance(args[1], tuple):
        host = args[1][0]
    elif event == "socket.getaddrinfo":
        host = args[0].decode() if isinstance(args[0], bytes) else args[0]
    else:
        return
    if not _loopback(host):
        os.write(_fd, f"{event} {host}\\n".encode())


sys.addaudithook(_hook)
"""


@pytest.fixture
def server(tmp_path: Path) -> Iterator[dict[str, Any]]:
    app = tmp_path / "app"
    shutil.copytree(EXAMPLE, app, ignore=shutil.ignore_patterns("__pycache__", ".langgraph_api"))
    audit_dir = tmp_path / "audit"
    audit_dir.mkdir()
    (audit_dir / "sitecustomize.py").write_text(_AUDIT)
    audit_log = tmp_path / "network.log"
    audit_log.touch()
    env = {k: v for k, v in os.environ.items() if not k.endswith("_API_KEY")}
    env.pop("SANDBOX_AGENT_MODEL", None)
    env.update(
        PYTHONPATH=str(audit_dir),
        NETWORK_AUDIT_LOG=str(audit_log),
        LANGCHAIN_SANDBOX_HOME=str(tmp_path / "sandbox-home"),
        # The CLI's usage analytics, the server's PyPI version check, LangSmith tracing.
        LANGGRAPH_CLI_NO_ANALYTICS="1",
        LANGGRAPH_NO_VERSION_CHECK="true",
        LANGSMITH_TRACING="false",
        LANGCHAIN_TRACING_V2="false",
    )
    port = free_port()
    log_path = tmp_path / "server.log"
    cli = Path(sys.executable).with_name("langgraph")
    with log_path.open("wb") as log:
        process = subprocess.Popen(
            [str(cli), "dev", "--no-browser", "--port", str(port)],
            cwd=app,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    url = f"http://127.0.0.1:{port}"
    try:
        deadline = time.monotonic() + 180
        while True:
            try:
                if httpx.get(f"{url}/ok", timeout=5).status_code == 200:
                    break
            except httpx.TransportError:
                pass
            if process.poll() is not None or time.monotonic() > deadline:
                pytest.fail(f"langgraph dev did not start:\n{log_path.read_text()}")
            time.sleep(0.5)
        yield {
            "url": url,
            "log": log_path,
            "network": audit_log,
            "blobs": tmp_path / "sandbox-home" / "blobs",
        }
    finally:
        os.killpg(process.pid, signal.SIGINT)
        try:
            process.wait(timeout=30)
        except subprocess.TimeoutExpired:
            os.killpg(process.pid, signal.SIGKILL)
            process.wait()


def test_two_runs_of_a_thread_under_langgraph_dev(server: dict[str, Any]) -> None:
    client = get_sync_client(url=server["url"])
    thread = client.threads.create()["thread_id"]

    def run(code: str) -> list[dict[str, Any]]:
        return [
            part.data
            for part in client.runs.stream(
                thread,
                "agent",
                input={"messages": [{"role": "user", "content": code}]},
                stream_mode="updates",
            )
            if part.event == "updates"
        ]

    first = run("secret = 41\nopen('notes.txt', 'w').write('kept on disk')")
    second = run("print(secret + 1, open('notes.txt').read())")

    state = client.threads.get_state(thread)["values"]
    tool_results = [m["content"] for m in state["messages"] if m["type"] == "tool"]
    assert len(tool_results) == 2
    assert "42 kept on disk" in str(tool_results[1])
    assert state["sandbox"]["revision"] == 2

    log = server["log"].read_text()
    assert "BlockingError" not in log, log
    assert "Blocking call" not in log, log
    assert "Traceback" not in log, log

    # Like a plain ToolNode's stream: {node: {channel: value}}; the tool message arrives once,
    # in the "tools" node's update, with the sandbox record.
    for updates in (first, second):
        assert "sandbox_tool_call" not in [node for u in updates for node in u]
        tools = [u["tools"] for u in updates if "tools" in u]
        assert len(tools) == 1
        assert [m["type"] for m in tools[0]["messages"]] == ["tool"]
        assert "sandbox" in tools[0]

    reached = server["network"].read_text().splitlines()
    assert reached == [], reached


def test_gc_of_another_application_keeps_what_langgraph_devs_threads_need(
    server: dict[str, Any], tmp_path: Path
) -> None:
    """``langgraph dev`` keeps its checkpoints across restarts (in ``.langgraph_api/``) with an
    InMemorySaver subclass. Another application sharing the blob store runs ``gc`` with only its
    own checkpointer: it must refuse, naming the server's saver, and delete nothing."""
    client = get_sync_client(url=server["url"])
    thread = client.threads.create()["thread_id"]
    client.runs.wait(
        thread,
        "agent",
        input={"messages": [{"role": "user", "content": "open('kept.txt', 'w').write('x')"}]},
    )
    blobs = sorted(p for p in server["blobs"].rglob("*") if p.is_file())
    assert blobs

    other = f"sqlite:///{tmp_path / 'other-app.sqlite'}"
    gc = [sys.executable, "-m", "langchain_sandbox.cli", "gc", "--blobs", str(server["blobs"])]
    done = forked_python.run(
        [*gc, f"--checkpointer={other}", "--allow-empty-checkpointer", "--grace", "0", "--yes"],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )
    assert done.returncode == 2, (done.stdout, done.stderr)
    assert "python:langgraph_runtime_inmem.checkpoint.InMemorySaver" in done.stderr
    assert sorted(p for p in server["blobs"].rglob("*") if p.is_file()) == blobs
