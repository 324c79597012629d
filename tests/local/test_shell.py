"""Shell commands in a local session: bash in the sandbox, beside (not inside) the Python worker."""

from __future__ import annotations

import pytest

from langchain_sandbox.errors import InvalidInputError, InvalidPathError
from langchain_sandbox.providers.local import LocalSession


async def test_exit_codes_streams_and_unicode(session: LocalSession) -> None:
    result = await session.run_command("printf 'a\\nb'; echo 'ünï ✓' >&2; exit 7")
    assert (result.stdout, result.stderr, result.exit_code) == ("a\nb", "ünï ✓\n", 7)
    assert result.kind == "command"
    assert not result.ok
    assert (await session.run_command("true")).ok


async def test_cwd_resolves_inside_the_workspace(session: LocalSession) -> None:
    await session.run_command("mkdir -p a/b")
    assert (await session.run_command("pwd", cwd="a/b")).stdout == "/home/user/a/b\n"
    assert (await session.run_command("pwd", cwd="/home/user/a")).stdout == "/home/user/a\n"
    for bad in ("../..", "/etc", "missing/dir"):
        with pytest.raises(InvalidPathError):
            await session.run_command("pwd", cwd=bad)
    await session.run_command("ln -s /etc escape")
    with pytest.raises(InvalidPathError):
        await session.run_command("pwd", cwd="escape")


async def test_env_is_per_call_and_validated(session: LocalSession) -> None:
    assert (await session.run_command("echo $A-$B", env={"A": "1", "B": "two"})).stdout == "1-two\n"
    assert (await session.run_command("echo ${A:-unset}")).stdout == "unset\n"
    with pytest.raises(InvalidInputError):
        await session.run_command("true", env={"BAD=NAME": "x"})


async def test_the_command_is_not_the_python_worker(session: LocalSession) -> None:
    await session.run_code("import os\nworker_pid = os.getpid()")
    shell_pid = await session.run_command("echo $$")
    worker_pid = await session.run_code("worker_pid")
    assert shell_pid.stdout.strip() != worker_pid.value
    files = await session.run_command("echo from-shell > /tmp/shared.txt")
    assert files.ok
    seen = await session.run_code("open('/tmp/shared.txt').read()")
    assert seen.value == repr("from-shell\n")


async def test_background_leftovers_end_with_the_command(session: LocalSession) -> None:
    await session.run_command("sleep 300 &")
    # A killed process may linger a moment as a zombie until pid 1 reaps it; alive is what counts.
    alive = await session.run_code(
        "import os\n"
        "states = []\n"
        "for pid in filter(str.isdigit, os.listdir('/proc')):\n"
        "    try:\n"
        "        stat = open(f'/proc/{pid}/stat').read()\n"
        "    except OSError:\n"
        "        continue\n"
        "    name, state = stat.split('(', 1)[1].rsplit(')', 1)[0], stat.rsplit(')', 1)[1].split()[0]\n"
        "    states.append((name, state))\n"
        "[s for s in states if s[0] == 'sleep' and s[1] != 'Z']"
    )
    assert alive.value == "[]"
