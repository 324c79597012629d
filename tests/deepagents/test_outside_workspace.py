"""Absolute paths outside ``/home/user``: the sandbox's own, written as its user, with a note that
the conversation does not keep them; never the host's."""

from __future__ import annotations

import uuid
from pathlib import Path
from typing import Any

import pytest

from langchain_sandbox.deepagents import NotedPath, SandboxBackend
from langchain_sandbox.runtime import SandboxRuntime

PROVIDERS = ["local", "e2b", "runloop", "kubernetes"]


def _assert_noted(path: object, expected: str) -> None:
    """``path`` equals ``expected`` and, as Deep Agents formats it into its reply, says that the
    conversation does not keep it."""
    assert path == expected
    assert isinstance(path, NotedPath)
    reply = f"Updated file {path}"
    assert reply.startswith(f"Updated file {expected} (note: {expected} is outside /home/user")
    assert "a resumed or forked conversation will not have it" in reply
    assert path.note in reply


@pytest.mark.parametrize("provider", PROVIDERS)
def test_files_outside_the_workspace_are_the_sandboxs_own(
    provider: str, tmp_path: Path, runtimes: dict[str, Any]
) -> None:
    with runtimes[provider](tmp_path) as runtime:
        backend = SandboxBackend(runtime=runtime)
        written = backend.write("/tmp/outside/notes.txt", "alpha\nbeta\n")
        assert written.error is None
        _assert_noted(written.path, "/tmp/outside/notes.txt")
        assert backend.execute("cat /tmp/outside/notes.txt").output == "alpha\nbeta\n"

        edited = backend.edit("/tmp/outside/notes.txt", "beta", "gamma")
        assert (edited.error, edited.occurrences) == (None, 1)
        _assert_noted(edited.path, "/tmp/outside/notes.txt")
        page = backend.read("/tmp/outside/notes.txt", offset=1, limit=1)
        assert page.file_data is not None
        assert page.file_data["content"] == "gamma"

        blob = bytes(range(256)) * 64
        [uploaded] = backend.upload_files([("/tmp/outside/blob.bin", blob)])
        assert uploaded.error is None
        _assert_noted(uploaded.path, "/tmp/outside/blob.bin")
        size = backend.execute("wc -c < /tmp/outside/blob.bin").output.strip()
        assert size == str(len(blob))
        [downloaded] = backend.download_files(["/tmp/outside/blob.bin"])
        assert downloaded.content == blob

        listing = backend.ls("/tmp/outside")
        assert listing.entries is not None
        assert {e["path"] for e in listing.entries} == {
            "/tmp/outside/notes.txt",
            "/tmp/outside/blob.bin",
        }
        # The staging files the bytes travelled through are gone from the workspace.
        assert backend.execute("ls -A /home/user | grep -c transfer").output.strip() == "0"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_what_the_sandboxs_user_may_not_write_is_permission_denied(
    provider: str, tmp_path: Path, runtimes: dict[str, Any]
) -> None:
    """The sandbox's permissions decide: its root and ``/usr`` are read-only to its user."""
    with runtimes[provider](tmp_path) as runtime:
        backend = SandboxBackend(runtime=runtime)
        for path in ("/usr/notes.md", "/notes.md"):
            refused = backend.write(path, "x")
            assert refused.error == (
                f"Error: Permission denied writing file '{path}'. Files under /home/user can be "
                "written, and are kept with the conversation."
            )
            assert backend.execute(f"test -e {path}; echo $?").output.strip() == "1"
        [upload] = backend.upload_files([("/usr/notes.md", b"x")])
        assert upload.error == "permission_denied"
        assert not isinstance(upload.path, NotedPath)
        edited = backend.edit("/etc/passwd", "user", "admin", replace_all=True)
        assert edited.error == "Error: Permission denied editing file '/etc/passwd'"
        backend.execute("echo secret > /tmp/locked && chmod 000 /tmp/locked")
        [locked] = backend.download_files(["/tmp/locked"])
        assert (locked.content, locked.error) == (None, "permission_denied")


def test_a_path_that_climbs_out_of_the_workspace_stays_in_the_sandbox(
    tmp_path: Path, runtimes: dict[str, Any]
) -> None:
    """``..`` is resolved as a sandbox path: ``/home/user/../../tmp/<name>`` is the sandbox's
    ``/tmp/<name>``, and the host's ``/tmp`` never sees it."""
    name = f"escape-{uuid.uuid4().hex}"
    host = Path("/tmp") / name
    with runtimes["local"](tmp_path) as runtime:
        backend = SandboxBackend(runtime=runtime)
        written = backend.write(f"/home/user/../../tmp/{name}", "inside")
        assert written.error is None
        assert backend.execute(f"cat /tmp/{name}").output == "inside"
        assert not host.exists()
        inside = backend.write("/home/user/sub/../kept.txt", "kept")
        assert inside.error is None
        assert not isinstance(inside.path, NotedPath)
        assert backend.execute("cat /home/user/kept.txt").output == "kept"


def test_a_resumed_conversation_has_the_workspace_but_not_tmp_as_the_note_said(
    tmp_path: Path,
) -> None:
    """A Deep Agent writes one file in the workspace and one in ``/tmp``; the model reads the note
    in the ``write_file`` reply. A new process (a runtime with a store of its own) resumes the
    thread: the workspace file is restored, the ``/tmp`` one is not."""
    from deepagents import create_deep_agent
    from langchain_core.messages import HumanMessage, ToolMessage
    from langgraph.checkpoint.memory import InMemorySaver

    from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter
    from langchain_sandbox.testing import ScriptedToolModel, call

    first_turn = [
        call("write_file", file_path="/home/user/kept.txt", content="kept"),
        call("write_file", file_path="/tmp/scratch.txt", content="scratch"),
        "done",
    ]

    def script(messages: list[Any]) -> Any:
        if isinstance(messages[-1], HumanMessage) and messages[-1].text == "again":
            return call("execute", command="cat /home/user/kept.txt; echo; ls /tmp/scratch.txt")
        if isinstance(messages[-1], ToolMessage) and not first_turn:
            return "done"
        return first_turn.pop(0)

    saver = InMemorySaver()
    config: Any = {"configurable": {"thread_id": "outside"}}

    def turn(base: str, message: str) -> list[Any]:
        store = LocalDirectoryBlobStore(tmp_path / "blobs")
        with SandboxRuntime(
            "local",
            provider_options={"base_dir": tmp_path / base},
            snapshotter=Snapshotter(store),
        ) as runtime:
            agent = create_deep_agent(
                ScriptedToolModel(script=script),
                backend=SandboxBackend(runtime=runtime),
                checkpointer=saver,
            )
            result = agent.invoke({"messages": [HumanMessage(message)]}, config)
        return [m.text for m in result["messages"] if isinstance(m, ToolMessage)]

    kept_reply, scratch_reply = turn("first", "go")
    assert kept_reply == "Updated file /home/user/kept.txt"
    assert scratch_reply.startswith(
        "Updated file /tmp/scratch.txt (note: /tmp/scratch.txt is outside /home/user, so the "
        "conversation does not keep it"
    )
    shown = turn("second", "again")[-1]
    assert "restored from the snapshot" in shown
    assert "kept\n" in shown
    assert "ls: cannot access '/tmp/scratch.txt': No such file or directory" in shown
