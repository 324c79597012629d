"""Variables move between sessions as one object graph, on every provider.

Each case defines state in one session, dumps it, loads the dump into a *new* session (another
interpreter, as after a crash or in another process) and checks the values there: what the
source-re-running dumps of old got wrong with no notice.
"""

from __future__ import annotations

import pytest

from langchain_sandbox.providers.base import Provider, VariablesDump


async def _dumped(provider: Provider, code: str) -> VariablesDump:
    """Run ``code`` in a new session and dump its variables."""
    async with await provider.create() as source:
        ran = await source.run_code(code)
        assert ran.ok, ran.render()
        return await source.dump_variables()


async def _check_in_new_session(provider: Provider, dump: VariablesDump, expression: str) -> str:
    async with await provider.create() as target:
        assert await target.load_variables(dump.data) == {}
        result = await target.run_code(expression)
        assert result.ok, result.render()
        assert result.value is not None
        return result.value


async def _round_trip(provider: Provider, code: str, expression: str) -> str:
    dump = await _dumped(provider, code)
    assert dump.skipped == (), dump.notice()
    return await _check_in_new_session(provider, dump, expression)


async def test_a_lambda_over_a_global_sees_the_global_and_its_later_changes(
    provider: Provider,
) -> None:
    code = "base = 1; f = lambda x: x + base\nbase = 10"
    value = await _round_trip(provider, code, "before = (base, f(1))\nbase = 100\n(before, f(1))")
    # Re-running the lambda's line reset base to 1; the restored lambda also reads the namespace.
    assert value == "((10, 11), 101)"


async def test_a_registering_decorator_does_not_run_again(provider: Provider) -> None:
    code = (
        "registry = []\n"
        "def register(fn):\n"
        "    registry.append(fn)\n"
        "    return fn\n"
        "@register\n"
        "def task():\n"
        "    return 'done'\n"
    )
    value = await _round_trip(provider, code, "len(registry), registry[0] is task, task()")
    assert value == "(1, True, 'done')"


async def test_an_alias_keeps_the_old_function_after_a_redefinition(provider: Provider) -> None:
    code = "def f():\n    return 'old'\nf_old = f\ndef f():\n    return 'new'\n"
    assert await _round_trip(provider, code, "f(), f_old()") == "('new', 'old')"


async def test_aliases_stay_one_object(provider: Provider) -> None:
    code = "a = [1, 2]\nb = a\nnested = {'inner': a}"
    value = await _round_trip(provider, code, "b.append(3)\n(a is b, nested['inner'] is a, a)")
    assert value == "(True, True, [1, 2, 3])"


async def test_numpy_views_alias_their_array_again(provider: Provider) -> None:
    """A slice, a transpose and a reshaped view come back as views of the one restored array:
    writing through any of them shows in the others, as before the dump."""
    code = (
        "import numpy as np\nbase = np.arange(12.0)\nrow = base[2:6]\n"
        "grid = base.reshape(3, 4)\nflipped = grid.T[::-1]\nsame = base"
    )
    check = (
        "row[0] = 100.0\ngrid[2, 3] = -1.0\n"
        "(base[2], flipped[0, 2], same is base, np.shares_memory(row, base),"
        " np.shares_memory(flipped, grid), row.flags.writeable)"
    )
    value = await _round_trip(provider, code, check)
    assert value == "(np.float64(100.0), np.float64(-1.0), True, True, True, True)"


async def test_the_interpreter_s_environment_cwd_and_recursion_limit_come_back(
    provider: Provider,
) -> None:
    code = (
        "import os, sys\nos.environ['STAGE'] = 'two'\nos.environ.pop('LANG', None)\n"
        "os.chdir('/tmp')\nsys.setrecursionlimit(4321)\nx = 1"
    )
    check = "import os, sys\n(os.environ.get('STAGE'), 'LANG' in os.environ, os.getcwd(), sys.getrecursionlimit())"
    assert await _round_trip(provider, code, check) == "('two', False, '/tmp', 4321)"


async def test_instances_of_classes_defined_in_the_sandbox(provider: Provider) -> None:
    code = (
        "class Point:\n"
        "    def __init__(self, x, y):\n"
        "        self.x, self.y = x, y\n"
        "    def norm(self):\n"
        "        return (self.x ** 2 + self.y ** 2) ** 0.5\n"
        "p = Point(3, 4)\n"
        "points = [p, Point(6, 8)]\n"
    )
    value = await _round_trip(
        provider, code, "isinstance(p, Point), points[0] is p, p.norm(), points[1].norm()"
    )
    assert value == "(True, True, 5.0, 10.0)"


async def test_an_lru_cache_function_comes_back_with_an_empty_cache(provider: Provider) -> None:
    code = (
        "import functools\n"
        "@functools.lru_cache(maxsize=None)\n"
        "def fib(n):\n"
        "    return n if n < 2 else fib(n - 1) + fib(n - 2)\n"
        "fib(30)\n"
    )
    value = await _round_trip(provider, code, "fib.cache_info().currsize, fib(40)")
    assert value == "(0, 102334155)"


async def test_a_closure_keeps_its_captured_state(provider: Provider) -> None:
    code = (
        "def make_counter():\n"
        "    count = 0\n"
        "    def bump():\n"
        "        nonlocal count\n"
        "        count += 1\n"
        "        return count\n"
        "    return bump\n"
        "counter = make_counter()\n"
        "counter(); counter()\n"
    )
    assert await _round_trip(provider, code, "counter()") == "3"


async def test_what_cannot_be_pickled_is_named_at_capture_with_the_reason(
    provider: Provider,
) -> None:
    code = (
        "import threading\n"
        "lock = threading.Lock()\n"
        "gen = (i for i in range(3))\n"
        "kept = {'rows': [1, 2, 3]}\n"
    )
    dump = await _dumped(provider, code)
    assert dump.skipped == ("gen", "lock")
    assert "generator" in dump.reasons["gen"]
    assert "lock" in dump.reasons["lock"]
    notice = dump.notice()
    assert notice is not None
    assert "gen (" in notice
    assert "lock (" in notice
    assert {"kept", "threading"} <= set(dump.saved)
    value = await _check_in_new_session(provider, dump, "kept['rows'], threading.__name__")
    assert value == "([1, 2, 3], 'threading')"


BIG = 70 * 1024 * 1024  # past the 64 MB that used to end the worker (one reply line)


async def test_a_dump_too_large_skips_the_largest_variable_and_keeps_the_session(
    provider: Provider,
) -> None:
    async with await provider.create() as session:
        ran = await session.run_code(f"big = bytes({BIG})\nsmall = [1, 2]\nalias = small")
        assert ran.ok, ran.render()
        dump = await session.dump_variables(max_bytes=8 * 1024 * 1024)
        assert dump.skipped == ("big",)
        assert "70.0 MB" in dump.reasons["big"]
        assert "8.0 MB" in dump.reasons["big"]
        assert len(dump.data) <= 8 * 1024 * 1024
        # The live variables are untouched.
        alive = await session.run_code("len(big), small is alias")
        assert alive.value == f"({BIG}, True)"
        assert alive.notices == []
    assert await _check_in_new_session(provider, dump, "small is alias, small") == "(True, [1, 2])"


@pytest.mark.timeout(600)
@pytest.mark.slow
async def test_a_dump_over_64_mb_moves_whole(provider: Provider) -> None:
    async with await provider.create() as session:
        ran = await session.run_code(
            f"import os\nbig = os.urandom({BIG})\ndigest = __import__('hashlib').sha256(big)"
            ".hexdigest()\nview = [big]"
        )
        assert ran.ok, ran.render()
        dump = await session.dump_variables(max_bytes=128 * 1024 * 1024)
        assert dump.skipped == (), dump.notice()
        assert len(dump.data) > BIG
        alive = await session.run_code("len(big)")
        assert alive.value == str(BIG)
    value = await _check_in_new_session(
        provider,
        dump,
        "import hashlib\nhashlib.sha256(big).hexdigest() == digest, view[0] is big",
    )
    assert value == "(True, True)"
