"""Tools called from code on E2B, through the real SDK against the emulator: the requests the
channel costs (a kernel call that makes ``tools``, the user's code as given, one envd file
write per answer, a kernel call that removes ``tools``), and what it leaves behind (nothing)."""

from __future__ import annotations

import re

from tool_hosts import DoublingHost

from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator


async def test_each_call_is_a_frame_out_and_one_file_write_in(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    session = await provider.create()
    emulator.clear_requests()
    code = "[tools.double(n=i) for i in range(3)]"
    result = await session.run_code(code, tools=DoublingHost())
    assert result.ok, result.render()
    assert result.value == "[0, 2, 4]"
    routes = [
        (r.route, r.body.get("code") if r.route == "jupyter execute" else None)
        for r in emulator.requests
    ]
    assert [route for route, _ in routes] == [
        "jupyter execute",  # makes the tools object
        "jupyter execute",  # the user's code, as given
        "envd POST /files",
        "envd POST /files",
        "envd POST /files",
        "jupyter execute",  # removes it
    ]
    assert routes[1][1] == code
    paths = [r.query["path"][0] for r in emulator.requests if r.route == "envd POST /files"]
    token = re.fullmatch(r"/tmp/\.langchain_sandbox-tool-([0-9a-f]{32})-1\.json", paths[0])
    assert token is not None, paths
    assert paths == [f"/tmp/.langchain_sandbox-tool-{token.group(1)}-{n}.json" for n in (1, 2, 3)]
    # The kernel deleted each answer; the workspace never saw one.
    left = await session.run_command("ls -A /tmp /home/user")
    assert ".langchain_sandbox-tool-" not in left.stdout
    # Without tools, a call is one request, as before.
    emulator.clear_requests()
    assert (await session.run_code("1 + 1")).value == "2"
    assert [r.route for r in emulator.requests] == ["jupyter execute"]
    await session.close()


async def test_a_tools_object_left_behind_refuses_calls_once_its_call_has_ended(
    provider: E2BProvider,
) -> None:
    """The host died between the call and the kernel call that removes ``tools``: the object
    that stays in the kernel raises instead of waiting for an answer that will never come."""
    from langchain_sandbox.providers.e2b._tool_channel import _install, _kernel

    session = await provider.create()
    await _kernel(session, _install(DoublingHost.specs, "/tmp/.left-behind", 0.0), "leave tools")
    result = await session.run_code(
        "try:\n    tools.double(n=1)\nexcept tools.ToolLimitError as exc:\n    r = str(exc)\nr"
    )
    assert result.value == "'the call these tools belong to ended'"
    await session.close()
