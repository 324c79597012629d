"""``expect_capture``: the variables dump a capture needs is queued right behind the call, and
used only while it still says what the interpreter holds."""

from __future__ import annotations

from langchain_sandbox.providers.local import LocalProvider, LocalSession

_HOOK = (
    "class Marked:\n"
    "    def __reduce__(self):\n"
    "        open('/tmp/dumped', 'a').write('dumped\\n')\n"
    "        return (Marked, ())\n"
    "marked = Marked()\n"
)


async def _loaded(provider: LocalProvider, data: bytes, expression: str) -> str | None:
    other = await provider.create()
    try:
        await other.load_variables(data)
        return (await other.run_code(expression)).value
    finally:
        await other.close()


async def test_the_dump_runs_right_behind_the_call_and_is_the_one_used(
    session: LocalSession, provider: LocalProvider
) -> None:
    await session.run_code(_HOOK + "x = 1")
    session.expect_capture()
    await session.run_shell("true")
    # The worker dumped before it read this command: it was queued behind the last one.
    assert (await session.run_shell("cat /tmp/dumped")).stdout == "dumped\n"
    session.expect_capture()
    await session.run_code("x = 2")
    dump = await session.dump_variables()
    assert (await session.run_shell("cat /tmp/dumped")).stdout == "dumped\n" * 2
    assert await _loaded(provider, dump.data, "x") == "2"


async def test_a_dump_queued_before_another_call_is_not_used(
    session: LocalSession, provider: LocalProvider
) -> None:
    session.expect_capture()
    await session.run_code("x = 1")
    await session.run_code("x = 2")  # the dump queued behind the first call is stale now
    dump = await session.dump_variables()
    assert await _loaded(provider, dump.data, "x") == "2"


async def test_a_worker_that_dies_in_the_call_costs_the_queued_dump_only(
    session: LocalSession,
) -> None:
    await session.run_code("x = 1")
    session.expect_capture()
    died = await session.run_code("import os\nos._exit(3)")
    assert died.error is not None
    dump = await session.dump_variables()  # asked anew, of the restarted worker
    assert dump.saved == ()
