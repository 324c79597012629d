"""Services follow the checkpoint across processes: a web server an agent started in the
background, and the port it exposed, come back after SIGKILL of the host process and a resume in
a new one, and on a fork to a checkpoint after they were started; a fork to a checkpoint from
before they were started does not start them. The model is told the new URL.

Each story runs ``agent_worker.py`` (story ``tools``: every human message is a tool call the model
makes) in fresh processes, with the snapshot blobs in a shared directory: on the local provider
(network off: the port is reached through the provider's relay) with a SQLite or a Postgres
checkpointer, and on E2B and Runloop through their emulators with SQLite (``STORY_SETUPS``). A
remote sandbox outlives the killed process with its server still running: the next process
attaches to it and tells the same URL, starting nothing; the forks are the same everywhere.
"""

from __future__ import annotations

import json
import re
from typing import Any

from process_helpers import http_get, server_command
from served_port import free_port
from story_providers import StoryProvider
from test_durable_restores import STORY_SETUPS, _kill, _turn
from test_durable_sessions import HANG_GUARD, Story, read_event


def _ask(tool: str, **args: Any) -> dict[str, str]:
    return {"message": json.dumps({"tool": tool, "args": args})}


_LIST = _ask("sandbox_process", action="list")


def _url(text: str) -> str:
    # A local relay's http://127.0.0.1:PORT, or a remote edge's https://PORT-KEY.DOMAIN (a
    # sentence's full stop after it is no part of the host).
    found = re.search(r"https?://[\w-]+(?:\.[\w-]+)*(?::\d+)?", text)
    assert found, text
    return found.group(0)


def _checkpoint(history: list[dict[str, Any]], tools: int) -> str:
    """The checkpoint at the end of the turn that made the ``tools``-th tool message."""
    return next(h["id"] for h in history if h["tools"] == tools and h["next"] == [])


@STORY_SETUPS
def test_a_service_comes_back_after_sigkill_and_on_a_fork_but_not_before_it_started(
    saver: tuple[str, str], blobs: str, story_provider: StoryProvider
) -> None:
    story = Story("tools", *saver, blobs, *story_provider.worker_args, env=story_provider.env)
    get = story_provider.open_url
    # The emulated E2B sandbox has network, so its loopback is the host's: a port of its own.
    port = free_port()
    first = story.start("--serve")
    try:
        read_event(first, "ready")
        _turn(first, _ask("sandbox_write_file", path="site/index.html", content="v1"))
        started = _turn(
            first,
            _ask(
                "sandbox_shell",
                command=server_command(port),
                cwd="site",
                background=True,
                name="web",
            ),
        )
        exposed = _turn(first, _ask("sandbox_process", action="expose", port=port))
        first_url = _url(exposed["tools"][-1])
        assert http_get(first_url + "/index.html", opener=get) == "v1"
        later = _turn(first, _ask("sandbox_exec", code="print('later')"))
    finally:
        _kill(first)
    assert started["tools"][-1].startswith("Started in the background: web (running)")
    history = later["history"]
    before_service, after_expose = _checkpoint(history, 1), _checkpoint(history, 3)

    second = story.start("--serve")
    try:
        read_event(second, "ready")
        resumed = _turn(second, _LIST)["tools"][-1]
        resumed_url = _url(resumed)
        assert http_get(resumed_url + "/index.html", opener=get) == "v1"
        back = _turn(second, {**_LIST, "checkpoint_id": before_service})["tools"][-1]
        forward = _turn(second, {**_LIST, "checkpoint_id": after_expose})["tools"][-1]
        forward_url = _url(forward)
        assert http_get(forward_url + "/index.html", opener=get) == "v1"
    finally:
        second.communicate(timeout=HANG_GUARD)
    if story_provider.sandboxes_outlive_their_process:
        # The sandbox outlived the killed process, its server still running: the new process
        # attaches, starts nothing, and tells the port's URL, which has not changed.
        assert "restored" not in resumed, resumed
        assert "started again" not in resumed, resumed
        assert f"Exposed ports: {port} at https://" in resumed, resumed
        assert resumed_url == first_url
    else:
        assert "Services of this checkpoint were started again: 'web'" in resumed, resumed
        assert (
            f"Exposed ports (a new sandbox serves them at new URLs): {port} at http://" in resumed
        )
        assert resumed_url != first_url  # the first process's relay died with it
    assert "web (running)" in resumed
    assert "'web' is not part of this checkpoint and was stopped" in back, back
    assert "web (running)" not in back
    assert "Services of this checkpoint were started again: 'web'" in forward, forward
    assert "web (running)" in forward

    # A new process that forks from before the service: nothing starts, nothing is said of it.
    forked = story.run("--message", _LIST["message"], "--checkpoint-id", before_service)
    text = forked["tools"][-1]
    assert "No background processes." in text, text
    assert "started again" not in text
    assert "services" not in (forked["sandbox"] or {})
