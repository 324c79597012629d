"""The runtime's processes on the real local provider (bubblewrap, network off): start, output
from an offset, list, stop, a port reached through its URL, and the services a record carries:
started again in a new runtime from the record (a new process's resume), stopped by a rewind to
a record from before them, kept or not by the idle TTL."""

from __future__ import annotations

import time
from collections.abc import Callable

import pytest
from process_helpers import SERVER, http_get

from langchain_sandbox.errors import InvalidInputError
from langchain_sandbox.processes import ProcessOutput
from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.state import SandboxState, merge_sandbox_state

GUARD = 60.0
"""Seconds a poll waits before the test fails (a hang guard; nothing asserts on time)."""


def _until_exited(runtime: SandboxRuntime, thread: str, name: str) -> ProcessOutput:
    deadline = time.monotonic() + GUARD
    while True:
        output = runtime.process_output(thread, name).value
        if output.state != "running" or time.monotonic() > deadline:
            return output
        time.sleep(0.05)


def _until_printed(runtime: SandboxRuntime, thread: str, name: str, text: str) -> ProcessOutput:
    deadline = time.monotonic() + GUARD
    while True:
        output = runtime.process_output(thread, name).value
        if text in output.text or time.monotonic() > deadline:
            return output
        time.sleep(0.05)


def test_output_is_read_from_an_offset_and_next_offset_goes_on(runtime: SandboxRuntime) -> None:
    started = runtime.start_process("t", "printf 'alpha\\nbeta\\n'", name="words", restart=False)
    assert started.value.name == "words"
    done = _until_exited(runtime, "t", "words")
    assert (done.text, done.next_offset, done.state, done.exit_code) == (
        "alpha\nbeta\n", 11, "exited", 0,
    )  # fmt: skip
    rest = runtime.process_output("t", "words", since=6).value
    assert (rest.text, rest.next_offset, rest.dropped) == ("beta\n", 11, 0)
    assert runtime.process_output("t", "words", since=11).value.text == ""
    # A process that must not restart is no service: the record does not keep it.
    assert "services" not in runtime.thread_record("t")  # type: ignore[operator]


async def test_async_twins_start_list_and_stop_a_process_group(runtime: SandboxRuntime) -> None:
    # The child of the shell must die with it: stop signals the whole group.
    command = "sleep 300 & echo child $!; wait"
    started = await runtime.astart_process("t", command, name="sleeper")
    assert started.record["services"]["processes"][0]["name"] == "sleeper"
    listed = await runtime.alist_processes("t")
    assert [(p.name, p.state) for p in listed.value] == [("sleeper", "running")]
    stopped = await runtime.astop_process("t", "sleeper")
    assert stopped.value.state == "stopped"
    assert "services" not in stopped.record
    check = await runtime.arun_command("t", "pgrep -x sleep || echo none")
    assert check.value.stdout.strip() == "none"


def test_bad_input_is_refused_and_the_session_stays_usable(runtime: SandboxRuntime) -> None:
    with pytest.raises(InvalidInputError, match="Invalid process name"):
        runtime.start_process("t", "true", name="../x")
    with pytest.raises(InvalidInputError, match="Invalid process name"):
        runtime.start_process("t", "true", name=".relay")
    with pytest.raises(InvalidInputError, match="non-empty"):
        runtime.start_process("t", "  ")
    with pytest.raises(InvalidInputError, match="from 1 to 65535"):
        runtime.expose_port("t", 70000)
    with pytest.raises(InvalidInputError):
        runtime.process_output("t", "nobody")
    assert runtime.run_command("t", "echo fine").value.stdout.strip() == "fine"


def test_a_web_server_answers_through_its_exposed_port(runtime: SandboxRuntime) -> None:
    runtime.write_files("t", {"/home/user/site/index.html": b"hello from the sandbox"})
    runtime.start_process("t", SERVER, name="web", cwd="site")
    url = runtime.expose_port("t", 8000).value
    assert url.startswith("http://127.0.0.1:")
    assert http_get(url + "/index.html") == "hello from the sandbox"
    assert runtime.expose_port("t", 8000).value == url  # the same URL for the same port
    record = runtime.thread_record("t")
    assert record is not None
    assert record["services"] == {
        "processes": [
            {"name": "web", "command": SERVER, "cwd": "/home/user/site", "env": {}, "restart": True}
        ],
        "ports": [8000],
    }
    assert "GET /index.html" in _until_printed(runtime, "t", "web", "GET /index.html").text


def test_a_new_runtime_starts_the_services_of_a_record_again_and_names_the_new_url(
    make: Callable[..., SandboxRuntime],
) -> None:
    """A resume in another process: a runtime that never saw the thread gets its record."""
    first = make()
    first.write_files("t", {"/home/user/index.html": b"v1"}, resumable=True)
    first.start_process("t", SERVER, name="web", env={"GREETING": "hi"}, resumable=True)
    old_url = first.expose_port("t", 8000, resumable=True).value
    record = first.thread_record("t")
    assert record is not None
    first.close()

    second = make()
    listed = second.list_processes("t", record=record)
    assert [(p.name, p.state) for p in listed.value] == [("web", "running")]
    notices = " ".join(listed.notices)
    assert "started again" in notices, notices
    assert "'web'" in notices, notices
    (new_url,) = [w.rstrip(".,") for w in notices.split() if w.startswith("http://")]
    assert new_url != old_url
    assert http_get(new_url + "/index.html") == "v1"
    pid = listed.value[0].pid  # the service's shell, started with the recorded env
    env = second.run_command("t", f"tr '\\0' '\\n' < /proc/{pid}/environ")
    assert "GREETING=hi" in env.value.stdout


def test_a_rewind_to_a_record_from_before_a_service_stops_it_and_one_after_starts_it(
    runtime: SandboxRuntime,
) -> None:
    """A fork or time travel in the same process: the live session is rewound in place."""
    runtime.write_files("t", {"/home/user/index.html": b"v1"}, resumable=True)
    before = runtime.thread_record("t")
    runtime.start_process("t", SERVER, name="web", resumable=True)
    runtime.expose_port("t", 8000, resumable=True)
    after = runtime.thread_record("t")
    assert before is not None
    assert after is not None

    back = runtime.list_processes("t", record=before)
    assert [p for p in back.value if p.state == "running"] == []
    assert any("'web' is not part of this checkpoint" in n for n in back.notices), back.notices
    assert "services" not in back.record

    forward = runtime.list_processes("t", record=after)
    assert [(p.name, p.state) for p in forward.value if p.state == "running"] == [
        ("web", "running")
    ]
    (url,) = [w.rstrip(".,") for w in " ".join(forward.notices).split() if w.startswith("http://")]
    assert http_get(url + "/index.html") == "v1"


@pytest.mark.parametrize("keep", [False, True])
def test_idle_ttl_counts_a_service_as_activity_only_when_asked(
    make: Callable[..., SandboxRuntime], keep: bool
) -> None:
    runtime = make(idle_ttl=0.2, keep_services_alive=keep)
    runtime.start_process("served", "sleep 300", name="svc")
    runtime.run_command("quiet", "true")
    deadline = time.monotonic() + GUARD
    # The quiet thread's session is closed first or together with the other: wait for it.
    while "quiet" in runtime.live_sessions() and time.monotonic() < deadline:
        time.sleep(0.05)
    assert "quiet" not in runtime.live_sessions()
    # The served thread was used first: a reaper round that closed the quiet one saw it idle too.
    assert ("served" in runtime.live_sessions()) == keep
    # Closed or not, the service runs when the thread is used again.
    listed = runtime.list_processes("served")
    assert [(p.name, p.state) for p in listed.value] == [("svc", "running")]


def test_the_reducer_keeps_the_services_of_the_highest_revision() -> None:
    service = {"processes": [{"name": "web", "command": "x"}], "ports": [8000]}
    started: SandboxState = {"revision": 2, "head": "b", "services": service}  # type: ignore[typeddict-item]
    stopped: SandboxState = {"revision": 3, "head": "c"}
    older: SandboxState = {"revision": 1, "head": "a"}
    assert merge_sandbox_state(started, older)["services"] == service
    assert merge_sandbox_state(older, started)["services"] == service
    assert "services" not in merge_sandbox_state(started, stopped)
    assert merge_sandbox_state(stopped, started).get("services") is None
    # A delta without a position (only exec_count) leaves the services alone.
    assert merge_sandbox_state(started, {"exec_count": 1})["services"] == service
