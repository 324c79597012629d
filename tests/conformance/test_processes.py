"""Background processes and exposed ports (``Session.start_process`` ... ``expose_port``), held
against every provider: one that says ``Capabilities.processes`` (or ``ports``) runs them for
real, one that does not refuses them with a ``CapabilityError`` and stays usable."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Callable

import pytest
from served_port import free_port

from langchain_sandbox.errors import CapabilityError, InvalidInputError, ProcessLimitError
from langchain_sandbox.processes import OUTPUT_HEAD, OUTPUT_TAIL, ProcessOutput, ProcessSpec
from langchain_sandbox.providers.base import Limits, Provider, Session, SessionSpec

_WAIT = 60.0  # a guard against a hang, never a measured time


async def _refused_unless_capable(session: Session) -> bool:
    """Whether ``session`` runs processes; if it says it cannot, that it refuses clearly."""
    if session.capabilities.processes:
        return True
    with pytest.raises(CapabilityError):
        await session.start_process(ProcessSpec("nope", "true"))
    assert (await session.run_command("echo still")).stdout == "still\n"
    return False


async def _ended(session: Session, name: str) -> ProcessOutput:
    deadline = time.monotonic() + _WAIT
    while True:
        output = await session.process_output(name)
        if output.state != "running":
            return output
        assert time.monotonic() < deadline, f"{name} still runs"
        await asyncio.sleep(0.1)


async def _printed(session: Session, name: str, text: str) -> ProcessOutput:
    """The output of ``name`` from the start, once it holds ``text`` (a loaded machine may start
    a process later than the first output that ``start_process`` waits for)."""
    deadline = time.monotonic() + _WAIT
    while True:
        output = await session.process_output(name)
        if text in output.text:
            return output
        assert time.monotonic() < deadline, f"{name} printed {output.text!r}"
        await asyncio.sleep(0.05)


async def _gone(session: Session, pids: list[str]) -> bool:
    """Whether none of ``pids`` runs (a zombie waiting to be reaped does not)."""
    alive = await session.run_command(
        " ; ".join(
            f"s=$(cut -d' ' -f3 /proc/{pid}/stat 2>/dev/null); "
            f'[ -n "$s" ] && [ "$s" != Z ] && echo alive'
            for pid in pids
        )
        + " ; true"
    )
    return "alive" not in alive.stdout


async def test_output_since_an_offset_and_the_exit_code(provider: Provider) -> None:
    async with await provider.create() as session:
        if not await _refused_unless_capable(session):
            return
        info = await session.start_process(
            ProcessSpec(
                "counter",
                "echo one; echo warn >&2; while [ ! -e go ]; do sleep 0.05; done; echo two; exit 7",
                env={"UNUSED": "x"},
            )
        )
        assert (info.name, info.state, info.cwd, info.exit_code) == (
            "counter",
            "running",
            "/home/user",
            None,
        )
        assert "one\nwarn\n".startswith(info.output)  # what it printed in its first moment
        first = await _printed(session, "counter", "warn\n")  # merged, in order
        assert (first.text, first.next_offset, first.dropped) == ("one\nwarn\n", 9, 0)
        await session.write_files({"go": b""})
        ended = await _ended(session, "counter")
        assert (ended.state, ended.exit_code) == ("exited", 7)
        rest = await session.process_output("counter", since=first.next_offset)
        assert (rest.text, rest.next_offset) == ("two\n", 13)
        assert (await session.process_output("counter", since=13)).text == ""
        listed = await session.list_processes()
        assert [(p.name, p.state, p.exit_code) for p in listed] == [("counter", "exited", 7)]


async def test_stop_ends_the_whole_process_group(provider: Provider) -> None:
    async with await provider.create() as session:
        if not await _refused_unless_capable(session):
            return
        # The leader ignores SIGTERM, so only the SIGKILL after the grace ends it; its child and
        # grandchild are in its group.
        command = (
            "trap '' TERM; (sleep 300 & echo $! > grandchild.pid; wait) & echo $! > child.pid; "
            "echo $$ > leader.pid; echo ready; while true; do sleep 1; done"
        )
        await session.start_process(ProcessSpec("tree", command))
        await _printed(session, "tree", "ready")
        pids = [
            data.decode().strip()
            for data in (
                await session.read_files(["leader.pid", "child.pid", "grandchild.pid"])
            ).values()
        ]
        assert not await _gone(session, pids)
        stopped = await session.stop_process("tree", grace=0.5)
        assert (stopped.state, stopped.exit_code) == ("stopped", 128 + 9)
        assert await _gone(session, pids)
        again = await session.stop_process("tree")  # already stopped: nothing to do
        assert again.state == "stopped"


async def test_the_cap_counts_running_processes_only(provider: Provider) -> None:
    spec = SessionSpec(limits=Limits(max_background_processes=2))
    async with await provider.create(spec) as session:
        if not await _refused_unless_capable(session):
            return
        for name in ("a", "b"):
            await session.start_process(ProcessSpec(name, "sleep 300"))
        with pytest.raises(ProcessLimitError, match=r"\(2\)"):
            await session.start_process(ProcessSpec("c", "sleep 300"))
        if session.capabilities.ports:  # a port relay is not one of them
            assert (await session.expose_port(8123)).startswith("http")
        await session.stop_process("a", grace=0)
        third = await session.start_process(ProcessSpec("c", "sleep 300"))
        assert third.state == "running"
        assert sorted(p.name for p in await session.list_processes()) == ["a", "b", "c"]


async def test_names_are_checked_and_a_running_name_is_not_taken_twice(
    provider: Provider,
) -> None:
    async with await provider.create() as session:
        if not await _refused_unless_capable(session):
            return
        for bad in ("", "../x", ".hidden", "a b", "x" * 65, "-rf", "a/b"):
            with pytest.raises(InvalidInputError):
                await session.start_process(ProcessSpec(bad, "true"))
        with pytest.raises(InvalidInputError):
            await session.start_process(ProcessSpec("ok", "  "))
        with pytest.raises(InvalidInputError, match="No process named 'ghost'"):
            await session.process_output("ghost")
        with pytest.raises(InvalidInputError):
            await session.process_output("ok", since=-1)
        with pytest.raises(InvalidInputError):
            await session.stop_process("ghost")
        await session.start_process(ProcessSpec("web", "sleep 300"))
        with pytest.raises(InvalidInputError, match="already running"):
            await session.start_process(ProcessSpec("web", "sleep 300"))
        await session.stop_process("web", grace=0)
        replaced = await session.start_process(ProcessSpec("web", "echo new; sleep 300"))
        assert replaced.state == "running"
        assert (await _printed(session, "web", "new")).text == "new\n"  # not the old one's
        assert (await session.run_command("echo usable")).stdout == "usable\n"


async def test_the_ring_keeps_head_and_tail_and_counts_what_it_dropped(
    provider: Provider,
) -> None:
    total = OUTPUT_HEAD + OUTPUT_TAIL + 300_000
    async with await provider.create() as session:
        if not await _refused_unless_capable(session):
            return
        # Offsets are visible in the text: each line is its own offset, zero-padded to 15 bytes.
        writer = (
            "python3 -c \"import sys; sys.stdout.write(''.join("
            f"'%015d\\n' % o for o in range(0, {total}, 16)))\""
        )
        await session.start_process(ProcessSpec("flood", writer))
        await _ended(session, "flood")
        head = await session.process_output("flood")
        assert head.dropped == 0
        assert head.next_offset == OUTPUT_HEAD  # the head ends, and a gap follows
        assert head.text.startswith("000000000000000\n000000000000016\n")
        tail = await session.process_output("flood", since=head.next_offset)
        kept_from = total - OUTPUT_TAIL
        assert tail.dropped == kept_from - OUTPUT_HEAD
        line = tail.text.split("\n", 2)[1]  # the first whole line after the cut
        assert int(line) % 16 == 0
        assert int(line) >= kept_from
        offset, read = head.next_offset + tail.dropped + len(tail.text), tail
        while read.next_offset < total:
            read = await session.process_output("flood", since=read.next_offset)
            assert read.dropped == 0
            offset += len(read.text)
        assert offset == total
        assert read.text.endswith(f"{total - 16:015d}\n")


async def test_a_web_server_answers_through_expose_port_with_the_network_off(
    provider: Provider, open_url: Callable[[str], bytes]
) -> None:
    # Runloop's and Kubernetes' sandboxes keep their network (they cannot turn it off) and,
    # emulated, share the host's loopback: a fixed port would be shared by concurrent tests.
    port = free_port()
    async with await provider.create(SessionSpec(network=False)) as session:
        if not session.capabilities.ports:
            with pytest.raises(CapabilityError):
                await session.expose_port(port)
            return
        await session.write_files({"site/index.html": b"<h1>hello from the sandbox</h1>"})
        await session.start_process(
            ProcessSpec("web", f"exec python3 -m http.server {port} --bind 127.0.0.1", cwd="site")
        )
        url = await session.expose_port(port)
        assert await session.expose_port(port) == url  # the same for the same port
        deadline = time.monotonic() + _WAIT

        while True:
            try:
                body = await asyncio.to_thread(open_url, f"{url}/index.html")
                break
            except OSError:  # the server may still be starting
                assert time.monotonic() < deadline
                await asyncio.sleep(0.2)
        assert body == b"<h1>hello from the sandbox</h1>"
        assert [p.name for p in await session.list_processes()] == ["web"]  # relays unlisted
        for bad in (0, 65536, "80", True):
            with pytest.raises(InvalidInputError):
                await session.expose_port(bad)  # type: ignore[arg-type]
