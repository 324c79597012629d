"""The provider contract (``providers/base.py``), held against every provider.

A behaviour that differs between providers is either a bug or a documented ``Capabilities`` flag;
the tests read the flags rather than the provider's name.
"""

from __future__ import annotations

import json

import pytest
from network_probe import LoopbackListener

from langchain_sandbox.errors import InvalidPackageNameError, InvalidPathError
from langchain_sandbox.providers.base import Limits, Provider, SessionSpec


async def test_python_state_persists_and_last_value_is_returned(provider: Provider) -> None:
    async with await provider.create() as session:
        assert session.capabilities.stateful_python
        first = await session.run_code("import math\nx = 40\ndef f(a):\n    return a + 1\n")
        assert first.ok, first.render()
        second = await session.run_code("x = f(x) + 1\nmath.floor(x + 0.5)")
        assert second.ok, second.render()
        assert second.value == "42"


async def test_streams_are_separate_and_faithful(provider: Provider) -> None:
    async with await provider.create() as session:
        code = (
            "import sys\n"
            "print('héllo\\n  wörld ✓')\n"
            "print('tab\\there', 'and a literal \\\\n')\n"
            "sys.stderr.write('warn: careful\\n')\n"
            "sys.stdout.write('partial')\n"
        )
        result = await session.run_code(code)
        assert result.ok, result.render()
        assert result.stdout == "héllo\n  wörld ✓\ntab\there and a literal \\n\npartial"
        assert result.stderr == "warn: careful\n"


async def test_exceptions_are_results_with_tracebacks(provider: Provider) -> None:
    async with await provider.create() as session:
        result = await session.run_code("def boom():\n    return 1 / 0\nboom()")
        assert not result.ok
        assert result.error is not None
        assert result.error.name == "ZeroDivisionError"
        assert "boom" in result.error.traceback
        again = await session.run_code("print('still here')")
        assert again.stdout == "still here\n"


async def test_commands_exit_codes_cwd_env(provider: Provider) -> None:
    async with await provider.create() as session:
        ok = await session.run_command("echo hi; echo oops >&2")
        assert (ok.stdout, ok.stderr, ok.exit_code) == ("hi\n", "oops\n", 0)
        failed = await session.run_command("exit 3")
        assert failed.exit_code == 3
        assert not failed.ok
        await session.run_command("mkdir -p sub/dir")
        where = await session.run_command(
            "pwd; echo $GREETING", cwd="sub/dir", env={"GREETING": "hey"}
        )
        assert where.stdout == "/home/user/sub/dir\nhey\n"
        home = await session.run_command("pwd")
        assert home.stdout == "/home/user\n"


async def test_files_round_trip_and_listing(provider: Provider) -> None:
    blob = bytes(range(256)) * 10
    async with await provider.create() as session:
        await session.write_files({"data/blob.bin": blob, "/home/user/notes.txt": b"hello\n"})
        read = await session.read_files(["data/blob.bin", "notes.txt"])
        assert read == {"data/blob.bin": blob, "notes.txt": b"hello\n"}
        seen = await session.run_code("open('/home/user/notes.txt').read()")
        assert seen.value == repr("hello\n")
        listing = {info.path: info for info in await session.list_files(".", recursive=True)}
        assert listing["data"].kind == "dir"
        assert listing["data/blob.bin"].size == len(blob)
        assert listing["notes.txt"].kind == "file"
        await session.remove_files(["data"])
        after = {info.path for info in await session.list_files(".", recursive=True)}
        assert "data/blob.bin" not in after
        assert "notes.txt" in after


@pytest.mark.parametrize("path", ["../outside.txt", "/etc/passwd", "a/../../b"])
async def test_paths_outside_the_workspace_are_refused(provider: Provider, path: str) -> None:
    async with await provider.create() as session:
        with pytest.raises(InvalidPathError):
            await session.write_files({path: b"x"})
        with pytest.raises(InvalidPathError):
            await session.read_files([path])
        assert (await session.run_code("print(1)")).stdout == "1\n"


async def test_missing_file_is_a_clear_error(provider: Provider) -> None:
    async with await provider.create() as session:
        with pytest.raises(InvalidPathError):
            await session.read_files(["does/not/exist.txt"])


async def test_timeout_stops_the_code_and_the_session_stays_usable(provider: Provider) -> None:
    spec = SessionSpec(limits=Limits(timeout=2.0))
    async with await provider.create(spec) as session:
        await session.run_code("kept = 'yes'")
        result = await session.run_code("while True:\n    pass")
        assert result.timed_out
        assert not result.ok
        after = await session.run_code("print('alive')")
        assert after.stdout == "alive\n"
        cmd = await session.run_command("sleep 30", timeout=1.0)
        assert cmd.timed_out


async def test_huge_output_is_truncated_at_the_source(provider: Provider) -> None:
    spec = SessionSpec(limits=Limits(max_output_bytes=64_000))
    async with await provider.create(spec) as session:
        result = await session.run_code("for i in range(400_000):\n    print(i)")
        assert result.truncated
        assert result.omitted_bytes > 1_000_000
        assert len(result.stdout) < 200_000
        assert result.stdout.startswith("0\n1\n2\n")
        assert result.stdout.rstrip().endswith("399999")


async def test_variables_move_to_a_new_session(provider: Provider) -> None:
    async with await provider.create() as source:
        assert source.capabilities.variables
        await source.run_code("import threading\nnums = [1, 2, 3]\nlock = threading.Lock()")
        dump = await source.dump_variables()
        assert "nums" in dump.saved
        assert "threading" in dump.saved
        assert "lock" in dump.skipped
    async with await provider.create() as target:
        failed = await target.load_variables(dump.data)
        assert failed == {}
        result = await target.run_code("sum(nums), threading.__name__")
        assert result.value == "(6, 'threading')"


async def test_hostile_package_names_are_refused(provider: Provider) -> None:
    async with await provider.create() as session:
        for hostile in (["--index-url=http://evil"], ["numpy; rm -rf /"], ["$(id)"]):
            with pytest.raises(InvalidPackageNameError):
                await session.install_packages(hostile)


async def test_record_is_json_and_attach_finds_the_session(provider: Provider) -> None:
    session = await provider.create(SessionSpec(metadata={"thread_id": "t-42"}))
    try:
        record = session.record
        assert json.loads(json.dumps(record)) == record
        assert record["provider"] == provider.name
        assert record["metadata"]["thread_id"] == "t-42"
        await session.write_files({"marker.txt": b"here"})
        again = await provider.attach(record)
        assert again is not None
        assert (await again.read_files(["marker.txt"]))["marker.txt"] == b"here"
        listed = await provider.list_sessions({"thread_id": "t-42"})
        assert session.session_id in {r["session_id"] for r in listed}
    finally:
        await session.close()
        await session.close()
    assert await provider.attach(record) is None


async def test_figures_come_back_as_png(provider: Provider) -> None:
    async with await provider.create() as session:
        assert session.capabilities.figures
        result = await session.run_code(
            "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [1, 4, 9])\nplt.show()"
        )
        assert result.ok, result.render()
        pngs = [a for a in result.artifacts if a.mime_type == "image/png"]
        assert pngs
        assert pngs[0].to_bytes().startswith(b"\x89PNG")


async def test_pause_then_attach_keeps_files_and_variables(provider: Provider) -> None:
    session = await provider.create()
    try:
        await session.run_code("import threading\ncounter = 41\nlock = threading.Lock()")
        await session.write_files({"kept.txt": b"kept"})
        await session.pause()
        await session.pause()
        again = await provider.attach(session.record)
        assert again is not None
        assert (await again.read_files(["kept.txt"]))["kept.txt"] == b"kept"
        result = await again.run_code("counter + 1")
        assert result.value == "42"
        lock_kept = (await again.run_code("'lock' in globals()")).value == "True"
        # Memory survives where the sandbox stays running (no pause) or pause keeps it whole;
        # otherwise only picklable variables come back, and the model is told what was lost.
        keeps_memory = provider.capabilities.pause_keeps_memory or not provider.capabilities.pause
        assert lock_kept is keeps_memory
        if not keeps_memory:
            assert any("lock" in notice for notice in result.notices), result.notices
    finally:
        await session.close()


async def test_network_is_denied_unless_asked_for(
    provider: Provider, loopback_listener: LoopbackListener
) -> None:
    """Where the provider controls the network, a sandbox reaches nothing unless its session
    asks; where it does not (Runloop: a devbox always has the network), the flag says so and the
    probe connects."""
    async with await provider.create() as session:
        result = await session.run_code(loopback_listener.probe)
    reached = loopback_listener.reached()
    assert result.ok, result.render()
    if provider.capabilities.network_control:
        assert result.stdout.startswith("refused"), result.render()
        assert not reached
    else:
        assert result.stdout == "connected\n", result.render()
        assert reached


async def test_malformed_environment_is_refused_before_anything_runs(provider: Provider) -> None:
    from langchain_sandbox.errors import InvalidInputError

    async with await provider.create() as session:
        for bad in ({"A=B": "1"}, {"": "1"}, {"OK": "nul\x00byte"}):
            with pytest.raises(InvalidInputError):
                await session.run_command("echo never", env=bad)
            with pytest.raises(InvalidInputError):
                await session.run_code("print('never')", env=bad)
        assert (await session.run_command("echo fine", env={"X": "1"})).stdout == "fine\n"


_BAD_TIMEOUTS = (0, -1, 0.0, float("nan"), float("inf"), "5", True)


async def test_bad_arguments_are_refused_the_same_way_and_the_session_stays_usable(
    provider: Provider,
) -> None:
    from langchain_sandbox.errors import InvalidInputError

    async with await provider.create() as session:
        for timeout in _BAD_TIMEOUTS:
            with pytest.raises(InvalidInputError, match="timeout"):
                await session.run_code("print('never')", timeout=timeout)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError, match="timeout"):
                await session.run_command("echo never", timeout=timeout)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError, match="timeout"):
                await session.install_packages(["six"], timeout=timeout)  # type: ignore[arg-type]
        with pytest.raises(InvalidInputError, match="code"):
            await session.run_code(b"print(1)")  # type: ignore[arg-type]
        for command in ("", "   ", None):
            with pytest.raises(InvalidInputError, match="command"):
                await session.run_command(command)  # type: ignore[arg-type]
        with pytest.raises(InvalidPathError):
            await session.run_command("pwd", cwd="../..")
        assert (await session.run_code("1 + 1", timeout=5)).value == "2"
        assert (await session.run_command("echo ok", timeout=5)).stdout == "ok\n"


async def test_records_of_another_provider_are_refused_by_attach_and_destroy(
    provider: Provider,
) -> None:
    from langchain_sandbox.errors import InvalidInputError

    async with await provider.create() as session:
        other = "e2b" if provider.name != "e2b" else "runloop"
        foreign = {**session.record, "provider": other}
        nameless = {key: value for key, value in session.record.items() if key != "sandbox_id"}
        for record in (foreign, nameless):
            with pytest.raises(InvalidInputError):
                await provider.attach(record)  # type: ignore[arg-type]
            with pytest.raises(InvalidInputError):
                await provider.destroy(record)  # type: ignore[arg-type]
        assert await session.is_alive(), "a refused record destroys nothing"
        assert (await session.run_code("'still here'")).value == "'still here'"


async def test_a_value_whose_repr_fails_is_a_placeholder_with_a_notice(provider: Provider) -> None:
    async with await provider.create() as session:
        result = await session.run_code(
            "class Bad:\n"
            "    def __repr__(self):\n"
            "        raise ValueError('no repr here')\n"
            "kept = 1\n"
            "Bad()\n"
        )
        assert result.ok, result.error
        assert result.value == "<Bad object: repr() failed with ValueError: no repr here>"
        # The host's words: the value is the sandbox's text, so the notice quotes none of it.
        assert (
            "repr() of the last value raised an exception; the value shown is a placeholder "
            "(its text, from the sandbox, names the type and the error)."
        ) in result.notices, result.notices
        assert (await session.run_code("kept + 1")).value == "2", "the cell's code ran"
