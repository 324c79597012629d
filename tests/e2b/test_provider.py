"""E2BProvider through the real SDK against the emulator: requests, lease, persistence, gc."""

from __future__ import annotations

import asyncio
import json

import pytest

from langchain_sandbox.errors import (
    InvalidInputError,
    InvalidPackageNameError,
    InvalidPathError,
    SessionClosedError,
)
from langchain_sandbox.providers.base import Limits, SessionSpec
from langchain_sandbox.providers.e2b import SESSION_KEY, TAG_KEY, E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator


async def test_a_warm_run_code_is_one_http_request(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        await session.run_code("x = 1")
        emulator.clear_requests()
        for _ in range(5):
            assert (await session.run_code("x += 1\nx")).ok
        assert [r.route for r in emulator.requests] == ["jupyter execute"] * 5


async def test_the_lease_is_extended_only_when_it_would_not_cover_the_call(
    emulator: E2BEmulator,
) -> None:
    provider = E2BProvider(
        api_key=emulator.api_key,
        api_url=emulator.url,
        sandbox_url=emulator.url,
        lease_seconds=120,
        lease_refresh_below=30,
    )
    async with await provider.create() as session:
        sandbox_id = session.record["sandbox_id"]
        assert emulator.requests[0].body["timeout"] == 120
        emulator.clear_requests()
        await session.run_code("1", timeout=60)  # 60 + 30 <= 120 left: no extension
        assert emulator.count("timeout") == 0
        emulator.clear_requests()
        await session.run_command("true", timeout=200)  # needs 230 s: extend first
        assert [r.route.split("/")[-1] for r in emulator.requests] == ["timeout", "envd Start"]
        assert emulator.requests[0].body == {"timeout": 230}
        assert emulator.lease_remaining(sandbox_id) > 200
        emulator.clear_requests()
        await session.run_code("2", timeout=60)  # the extended lease still covers it
        assert emulator.count("timeout") == 0


async def test_create_tags_the_sandbox_and_maps_the_spec(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    spec = SessionSpec(env={"MODE": "test"}, network=False, metadata={"thread_id": "t-9"})
    async with await provider.create(spec) as session:
        body = emulator.requests[0].body
        assert body["metadata"] == {
            "thread_id": "t-9",
            TAG_KEY: "1",
            SESSION_KEY: session.session_id,
        }
        assert body["envVars"] == {"MODE": "test"}
        assert body["allow_internet_access"] is False
        assert emulator.requests[0].headers["idempotency-key"]
        result = await session.run_command("echo $MODE")
        assert result.stdout == "test\n"
        # allow_internet_access=False is honoured: only loopback exists in the sandbox.
        interfaces = await session.run_command("ls /proc/sys/net/ipv4/conf")
        assert interfaces.stdout.split() == ["all", "default", "lo"]


async def test_pause_then_attach_resumes_with_memory_from_another_provider(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    session = await provider.create(SessionSpec(metadata={"thread_id": "t-1"}))
    await session.run_code("import json\ncounter = 41")
    await session.write_files({"notes/a.txt": b"kept"})
    await session.pause()
    await session.pause()  # idempotent, no second request
    assert emulator.count(r"/pause$") == 1
    record = json.loads(json.dumps(session.record))  # survives a checkpoint round trip
    assert record["state"]["paused"] is True

    other = E2BProvider(api_key=emulator.api_key, api_url=emulator.url, sandbox_url=emulator.url)
    attached = await other.attach(record)
    assert attached is not None
    assert attached.session_id == session.session_id
    assert (await attached.run_code("counter + 1")).value == "42"
    assert await attached.read_files(["notes/a.txt"]) == {"notes/a.txt": b"kept"}
    await attached.close()
    await attached.close()  # idempotent
    assert await other.attach(record) is None
    with pytest.raises(SessionClosedError):
        await attached.run_code("1")


async def test_a_paused_session_resumes_itself_when_used(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        await session.run_code("v = 'still here'")
        await session.pause()
        assert await session.is_alive()
        emulator.clear_requests()
        assert (await session.run_code("v")).value == "'still here'"
        assert [r.route.rsplit("/", 1)[-1] for r in emulator.requests] == [
            "connect",
            "jupyter execute",
        ]


async def test_on_timeout_pause_keeps_an_idle_sandbox_for_attach(emulator: E2BEmulator) -> None:
    provider = E2BProvider(
        api_key=emulator.api_key,
        api_url=emulator.url,
        sandbox_url=emulator.url,
        lease_seconds=60,
        on_timeout="pause",
    )
    session = await provider.create()
    await session.run_code("answer = 42")
    assert emulator.requests[0].body["autoPause"] is True
    sandbox_id = session.record["sandbox_id"]
    emulator.advance_clock(emulator.lease_remaining(sandbox_id) + 1)
    assert emulator.sandbox_ids("paused") == [sandbox_id]
    attached = await provider.attach(session.record)
    assert attached is not None
    assert (await attached.run_code("answer")).value == "42"
    await attached.close()


async def test_list_sessions_finds_only_ours_and_destroy_reaps(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    ours = [await provider.create(SessionSpec(metadata={"thread_id": f"t{i}"})) for i in range(2)]
    from e2b_code_interpreter import E2B

    foreign = await E2B(api_key=emulator.api_key, api_url=emulator.url).AsyncSandbox.create(
        metadata={"thread_id": "t0"}
    )
    await ours[1].pause()

    everything = await provider.list_sessions()
    assert sorted(r["session_id"] for r in everything) == sorted(s.session_id for s in ours)
    assert {r["metadata"]["thread_id"] for r in everything} == {"t0", "t1"}
    assert [r["state"]["paused"] for r in await provider.list_sessions({"thread_id": "t1"})] == [
        True
    ]
    only_t0 = await provider.list_sessions({"thread_id": "t0"})
    assert [r["sandbox_id"] for r in only_t0] == [ours[0].record["sandbox_id"]]
    assert await provider.destroy(only_t0[0])
    assert not await provider.destroy(only_t0[0])
    assert sorted(emulator.sandbox_ids()) == sorted(
        [ours[1].record["sandbox_id"], foreign.sandbox_id]
    )
    await ours[1].close()
    await foreign.kill()


async def test_output_streams_to_the_callback_and_is_capped(provider: E2BProvider) -> None:
    spec = SessionSpec(limits=Limits(max_output_bytes=10_000))
    async with await provider.create(spec) as session:
        seen: list[tuple[str, str]] = []
        result = await session.run_command(
            "for i in $(seq 1 20000); do echo line$i; done; echo done >&2",
            on_output=lambda stream, text: seen.append((stream, text)),
        )
        streamed = "".join(text for stream, text in seen if stream == "stdout")
        assert streamed.endswith("line20000\n")  # the callback sees everything
        assert result.truncated
        assert result.omitted_bytes > 100_000
        assert result.stdout.startswith("line1\n")
        assert result.stdout.endswith("line20000\n")
        assert len(result.stdout) < 11_000
        assert result.stderr == "done\n"


async def test_commands_run_in_cwd_and_time_out_without_killing_the_session(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        await session.write_files({"sub/x.txt": b"x"})
        assert (await session.run_command("ls", cwd="sub")).stdout == "x.txt\n"
        with pytest.raises(InvalidPathError):
            await session.run_command("ls", cwd="../..")
        slow = await session.run_command("echo begun; sleep 30; echo never", timeout=1)
        assert slow.timed_out
        assert slow.exit_code is None
        assert slow.stdout == "begun\n"
        assert emulator.count("SendSignal") == 1  # the process was killed, not abandoned
        assert (await session.run_command("echo after")).stdout == "after\n"


async def test_files_outside_the_workspace_never_reach_the_network(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        emulator.clear_requests()
        for path in ("../etc/passwd", "/etc/passwd", "a/../../b", "a\\b", ""):
            with pytest.raises(InvalidPathError):
                await session.read_files([path])
            with pytest.raises(InvalidPathError):
                await session.write_files({path: b"x"})
        with pytest.raises(InvalidPathError):
            await session.remove_files(["."])
        assert emulator.requests == []
        with pytest.raises(InvalidPathError):
            await session.read_files(["missing.txt"])
        with pytest.raises(InvalidPathError):
            await session.list_files("missing-dir")
        await session.remove_files(["missing.txt"])  # missing paths are ignored


async def test_reading_a_file_over_the_limit_is_refused(provider: E2BProvider) -> None:
    async with await provider.create(SessionSpec(limits=Limits(max_file_bytes=1000))) as session:
        await session.write_files({"big.bin": b"x" * 5000, "small.bin": b"y" * 10})
        with pytest.raises(InvalidInputError, match="1000-byte limit"):
            await session.read_files(["big.bin"])
        assert await session.read_files(["small.bin"]) == {"small.bin": b"y" * 10}


async def test_install_packages_validates_before_sending_anything(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create(SessionSpec(network=False)) as session:
        emulator.clear_requests()
        for bad in (["--index-url=http://evil"], ["x; rm -rf /"], ["$(id)"], []):
            with pytest.raises(InvalidPackageNameError):
                await session.install_packages(bad)
        assert emulator.requests == []
        # Without network pip cannot download: a failed install is a result, not an exception.
        streamed: list[tuple[str, str]] = []
        result = await session.install_packages(
            ["surely-not-a-real-package-xyz==1.0"],
            timeout=120,
            on_output=lambda stream, text: streamed.append((stream, text)),
        )
        assert not result.ok
        assert result.exit_code not in (0, None)
        start = next(r for r in emulator.requests if r.route == "envd Start")
        assert start.body["process"]["args"][-1] == (
            "PIP_BREAK_SYSTEM_PACKAGES=1 python3 -m pip install --disable-pip-version-check "
            "--no-input --progress-bar off -- surely-not-a-real-package-xyz==1.0"
        )
        # pip's output reached on_output while it ran, as it will be in the result.
        assert "".join(t for s, t in streamed if s == "stderr") == result.stderr
        assert "surely-not-a-real-package-xyz" in result.stderr


async def test_variables_round_trip_between_sessions(provider: E2BProvider) -> None:
    async with await provider.create() as source:
        await source.run_code(
            "import math\nrows = [1, 2, 3]\ndef area(r):\n    return round(math.pi * r * r, 2)\n"
            "gen = (i for i in range(3))"
        )
        dump = await source.dump_variables()
        assert set(dump.saved) == {"area", "math", "rows"}
        assert dump.skipped == ("gen",)
        # Dumping defines nothing in the user's namespace.
        assert (
            await source.run_code("sorted(k for k in globals() if 'langchain' in k)")
        ).value == "[]"
    async with await provider.create() as target:
        assert await target.load_variables(dump.data) == {}
        assert (await target.run_code("area(1), sum(rows)")).value == "(3.14, 6)"


async def test_sessions_run_concurrently_without_mixing(provider: E2BProvider) -> None:
    sessions = await asyncio.gather(*(provider.create() for _ in range(3)))
    await asyncio.gather(*(s.run_code(f"me = {i}") for i, s in enumerate(sessions)))
    await asyncio.gather(
        *(s.write_files({"id.txt": str(i).encode()}) for i, s in enumerate(sessions))
    )
    values = await asyncio.gather(*(s.run_code("me") for s in sessions))
    files = await asyncio.gather(*(s.read_files(["id.txt"]) for s in sessions))
    assert [v.value for v in values] == ["0", "1", "2"]
    assert [f["id.txt"] for f in files] == [b"0", b"1", b"2"]
    await asyncio.gather(*(s.close() for s in sessions))


async def test_code_output_streams_while_the_cell_runs(provider: E2BProvider) -> None:
    async with await provider.create() as session:
        first_chunk = asyncio.Event()
        seen: list[tuple[str, str]] = []

        def on_output(stream: str, text: str) -> None:
            seen.append((stream, text))
            first_chunk.set()

        task = asyncio.create_task(
            session.run_code(
                "import sys, time\nprint('early', flush=True)\n"
                "sys.stderr.write('warn\\n')\ntime.sleep(2)\nprint('late')",
                on_output=on_output,
            )
        )
        await asyncio.wait_for(first_chunk.wait(), 30)
        assert not task.done()  # the first chunk arrived before the cell ended
        result = await task
        assert result.stdout == "early\nlate\n"
        assert result.stderr == "warn\n"
        assert "".join(t for s, t in seen if s == "stdout") == "early\nlate\n"


async def test_bad_input_is_refused_before_any_request(
    provider: E2BProvider, emulator: E2BEmulator
) -> None:
    async with await provider.create() as session:
        emulator.clear_requests()
        for call in (
            lambda: session.run_command("   "),
            lambda: session.run_code("1", env={"A=B": "x"}),
            lambda: session.run_command("true", env={"A": "nul\x00"}),
            lambda: session.run_code("1", timeout=0),
        ):
            with pytest.raises(InvalidInputError):
                await call()
        assert emulator.requests == []
        assert (await session.run_code("1", env={"A": "ok"})).value == "1"
