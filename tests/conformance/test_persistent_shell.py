"""``Session.run_shell``: a persistent shell on every provider. ``cd`` and ``export`` in one call
are there in the next, and in a new session restored from a snapshot (a resume in a new process,
a fork); a timeout or a killed command leaves the shell usable and as it was."""

from __future__ import annotations

from pathlib import Path

from langchain_sandbox.providers.base import Limits, Provider, SessionSpec
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


async def test_cd_and_export_carry_over_to_the_next_command(provider: Provider) -> None:
    async with await provider.create() as session:
        first = await session.run_shell(
            "mkdir -p proj/src && cd proj/src && export GREETING='hello world' && echo set"
        )
        assert (first.exit_code, first.stdout) == (0, "set\n")
        second = await session.run_shell('pwd; echo "$GREETING"')
        assert second.stdout == "/home/user/proj/src\nhello world\n"

        # A relative path means the shell's directory now; cwd= moves the shell for good.
        await session.run_shell("echo here > note.txt")
        assert await session.read_files(["proj/src/note.txt"]) == {"proj/src/note.txt": b"here\n"}
        moved = await session.run_shell("pwd", cwd="proj")
        assert moved.stdout == "/home/user/proj\n"
        assert (await session.run_shell("pwd")).stdout == "/home/user/proj\n"

        # unset and export -n are remembered too; exit codes are the command's own.
        await session.run_shell("unset GREETING")
        assert (await session.run_shell('echo "${GREETING-gone}"')).stdout == "gone\n"
        failed = await session.run_shell("export LEVEL=3; cd /tmp; exit 7")
        assert failed.exit_code == 7
        after = await session.run_shell('pwd; echo "$LEVEL"')
        assert after.stdout == "/tmp\n3\n"

        # The stateless contract is untouched: run_command starts fresh every time.
        plain = await session.run_command('pwd; echo "${LEVEL-none}"')
        assert plain.stdout == "/home/user\nnone\n"


async def test_the_sandbox_environment_is_not_copied_into_the_shell_state(
    provider: Provider,
) -> None:
    spec = SessionSpec(env={"SERVICE_TOKEN": "from-the-spec"})
    async with await provider.create(spec) as session:
        await session.run_shell("export MINE=1")
        state = (await session.read_files([".langchain_sandbox/shell_state.sh"]))[
            ".langchain_sandbox/shell_state.sh"
        ]
        assert b"MINE" in state
        assert b"from-the-spec" not in state
        assert b"SERVICE_TOKEN" not in state


async def test_a_timed_out_command_leaves_the_shell_usable_and_unchanged(
    provider: Provider,
) -> None:
    async with await provider.create(SessionSpec(limits=Limits(timeout=30.0))) as session:
        await session.run_shell("mkdir -p kept && cd kept && export KEPT=yes")
        stuck = await session.run_shell("cd /tmp && export KEPT=no && sleep 60", timeout=1.0)
        assert stuck.timed_out
        after = await session.run_shell('pwd; echo "$KEPT"')
        assert after.stdout == "/home/user/kept\nyes\n"
        # A shell killed outright (no trap can run) changes nothing either.
        killed = await session.run_shell("cd /tmp && export KEPT=killed && kill -KILL $$")
        assert killed.exit_code != 0
        assert (await session.run_shell('pwd; echo "$KEPT"')).stdout == after.stdout
        broken = await session.run_shell("if then")
        assert broken.exit_code == 2
        assert "syntax error" in broken.stderr
        assert (await session.run_shell('pwd; echo "$KEPT"')).stdout == after.stdout


async def test_the_shell_state_survives_a_restore_into_a_new_session(
    provider: Provider, tmp_path: Path
) -> None:
    snapshotter = Snapshotter(LocalDirectoryBlobStore(tmp_path / "blobs"))
    async with await provider.create() as source:
        await source.run_shell("mkdir -p work/deep && cd work/deep && export MODE=resumed")
        first = await snapshotter.capture(source, revision=1)
        # A command that changes nothing leaves the state file alone: the next (incremental)
        # snapshot must still carry it.
        await source.run_shell("echo unchanged")
        info = await snapshotter.capture(source, revision=2, base=first.ref)
    # A new process, a resume or a fork: a new session restored from the snapshot.
    async with await provider.create() as target:
        assert (await target.run_command("pwd")).stdout == "/home/user\n"
        await snapshotter.restore(target, info.ref)
        restored = await target.run_shell('pwd; echo "$MODE"')
        assert restored.stdout == "/home/user/work/deep\nresumed\n"


_STATE = ".langchain_sandbox/shell_state.sh"


async def test_a_command_that_changes_nothing_leaves_the_state_file_alone(
    provider: Provider,
) -> None:
    async with await provider.create() as session:
        await session.run_shell("mkdir -p sub && cd sub && export KEPT=1")
        # Python's stat, not coreutils': gVisor's runsc 20221219 refuses the statx call `stat` makes.
        inode = f"python3 -c \"import os; print(os.stat('/home/user/{_STATE}').st_ino)\""
        before = (await session.run_command(inode)).stdout
        assert (await session.run_shell("echo hi; true")).stdout == "hi\n"
        # Not rewritten: the same file, and no temporary file left beside it.
        assert (await session.run_command(inode)).stdout == before
        listing = await session.run_command(
            "python3 -c \"import os; print(*os.listdir('/home/user/.langchain_sandbox'))\""
        )
        assert listing.stdout == "shell_state.sh\n"
        # A change still lands.
        await session.run_shell("cd .. && export KEPT=2")
        assert (await session.run_shell('pwd; echo "$KEPT"')).stdout == "/home/user\n2\n"


async def test_the_state_is_saved_again_if_a_command_removes_it_without_changing_it(
    provider: Provider,
) -> None:
    async with await provider.create() as session:
        await session.run_shell("mkdir -p sub && cd sub && export KEPT=yes")
        await session.run_shell("rm -rf /home/user/.langchain_sandbox")
        assert (await session.run_shell('pwd; echo "$KEPT"')).stdout == "/home/user/sub\nyes\n"
        await session.run_shell(f"echo 'export KEPT=edited' >> /home/user/{_STATE}")
        assert (await session.run_shell('echo "$KEPT"')).stdout == "yes\n"


async def test_a_command_that_changes_directory_then_fails_keeps_the_directory(
    provider: Provider,
) -> None:
    async with await provider.create() as session:
        failed = await session.run_shell("mkdir -p a/b && cd a/b && export STEP=1 && false")
        assert failed.exit_code == 1
        assert (await session.run_shell('pwd; echo "$STEP"')).stdout == "/home/user/a/b\n1\n"
        strict = await session.run_shell("set -eu; cd ..; export STEP=2; false; echo unreached")
        assert (strict.exit_code, strict.stdout) == (1, "")
        assert (await session.run_shell('pwd; echo "$STEP"')).stdout == "/home/user/a\n2\n"


async def test_shell_options_a_command_sets_do_not_leak_into_the_save(
    provider: Provider,
) -> None:
    spec = SessionSpec(env={"MODE": "quiet"})
    async with await provider.create(spec) as session:
        # xtrace would trace the save into the command's stderr; nocasematch would make a value
        # that only changed case look unchanged; noglob and IFS must not split or expand names.
        traced = await session.run_shell("set -x; export MODE=QUIET; cd /tmp")
        assert "__lcs" not in traced.stderr
        await session.run_shell("shopt -s nocasematch; export MODE=Quiet")
        assert (await session.run_shell('pwd; echo "$MODE"')).stdout == "/tmp\nQuiet\n"
        await session.run_shell("set -f; IFS=_E; export NEW_ONE='a b*'")
        assert (await session.run_shell('echo "$NEW_ONE"')).stdout == "a b*\n"


async def test_the_shell_works_when_its_scratch_file_in_tmp_cannot_be_written(
    provider: Provider,
) -> None:
    async with await provider.create() as session:
        # A directory where the wrapper lists exported names: it lists them another way.
        await session.run_command("mkdir -p /tmp/.langchain_sandbox_exported")
        await session.run_shell("mkdir -p d && cd d && export LISTED=yes")
        done = await session.run_shell('pwd; echo "$LISTED"')
        assert (done.stdout, done.stderr) == ("/home/user/d\nyes\n", "")


async def test_a_command_reaches_bash_exactly_as_written(provider: Provider) -> None:
    async with await provider.create() as session:
        # Quotes, backslashes, control characters and non-ASCII text survive the wrapper's
        # quoting, and a multi-line command's own line numbers are bash's usual ones.
        command = "printf '%s|' 'it'\\''s' \"a\\\\b\" $'tab\\there' 'é✓\x7f'\necho \"$LINENO\""
        done = await session.run_shell(command)
        plain = await session.run_command(command)
        assert done.stdout == plain.stdout == "it's|a\\b|tab\there|é✓\x7f|2\n"
