"""The persistent Python worker: state, values, faithful streams, errors, figures, streaming."""

from __future__ import annotations

import base64
import sys
from pathlib import Path

from langchain_sandbox.providers.local import LocalSession

_REPOSITORY = str(Path(__file__).resolve().parents[2])


async def test_variables_imports_and_functions_persist(session: LocalSession) -> None:
    first = await session.run_code(
        "import math as m\ncounter = 1\ndef double(v):\n    return 2 * v\nclass Box:\n    n = 5\n"
    )
    assert first.ok, first.render()
    assert first.value is None
    second = await session.run_code("counter += double(Box.n)\nm.sqrt(counter ** 2)")
    assert second.value == "11.0"


async def test_value_of_the_last_bare_expression_only(session: LocalSession) -> None:
    assert (await session.run_code("x = 3")).value is None
    assert (await session.run_code("x * 2")).value == "6"
    assert (await session.run_code("x\ny = x + 1")).value is None
    assert (await session.run_code("None")).value is None
    assert (await session.run_code("'a\\nb'")).value == repr("a\nb")
    assert (await session.run_code("print('hi')")).value is None


async def test_streams_are_captured_faithfully(session: LocalSession) -> None:
    code = (
        "import sys, subprocess\n"
        "print('line one\\nline two')\n"
        "print('ünïcødé ✓ 🐍')\n"
        "print(repr('escaped\\\\n stays'))\n"
        "sys.stderr.write('to stderr\\n')\n"
        "subprocess.run(['echo', 'from a child'])\n"
        "subprocess.run(['sh', '-c', 'echo child err >&2'])\n"
        "sys.stdout.write('no newline at the end')\n"
    )
    result = await session.run_code(code)
    assert result.ok, result.render()
    assert result.stdout == (
        "line one\nline two\nünïcødé ✓ 🐍\n'escaped\\\\n stays'\nfrom a child\nno newline at the end"
    )
    assert result.stderr == "to stderr\nchild err\n"


async def test_user_code_cannot_break_the_protocol(session: LocalSession) -> None:
    hostile = (
        "import os, sys, json\n"
        'print(json.dumps({"id": 1, "ev": "done", "value": "forged"}))\n'
        "os.write(1, b'raw fd write\\n')\n"
        "os.write(2, b'raw fd err\\n')\n"
        "sys.stdout.close()\n"
        "sys.stderr.close()\n"
    )
    result = await session.run_code(hostile)
    assert result.ok, result.render()
    assert result.value is None
    assert '"value": "forged"' in result.stdout
    assert "raw fd write\n" in result.stdout
    assert result.stderr == "raw fd err\n"
    after = await session.run_code("import os\nos.close(1)\nos.close(2)")
    assert after.ok
    again = await session.run_code("print('still talking')\n41 + 1")
    assert (again.stdout, again.value) == ("still talking\n", "42")


async def test_exceptions_are_results_with_the_users_lines(session: LocalSession) -> None:
    await session.run_code("def inner(d):\n    return d['missing']\n")
    result = await session.run_code("x = 1\ninner({})")
    assert not result.ok
    assert result.exit_code == 1
    assert result.error is not None
    assert result.error.name == "KeyError"
    assert "return d['missing']" in result.error.traceback
    assert "inner({})" in result.error.traceback
    # Only the user's frames: none of the worker's machinery.
    assert result.error.traceback.count('File "') == 2
    assert "worker" not in result.error.traceback
    syntax = await session.run_code("def broken(:\n    pass")
    assert syntax.error is not None
    assert syntax.error.name == "SyntaxError"
    exits = await session.run_code("raise SystemExit(3)")
    assert exits.error is not None
    assert exits.error.name == "SystemExit"
    assert (await session.run_code("x")).value == "1"


async def test_matplotlib_figures_come_back_as_png(session: LocalSession) -> None:
    result = await session.run_code(
        "import matplotlib.pyplot as plt\nplt.plot([1, 2, 3], [3, 1, 2])\nplt.title('t')\n"
    )
    assert result.ok, result.render()
    assert result.stderr == ""  # text was drawn without fontconfig complaining
    assert len(result.artifacts) == 1
    figure = result.artifacts[0]
    assert figure.mime_type == "image/png"
    assert base64.b64decode(figure.data).startswith(b"\x89PNG\r\n\x1a\n")
    assert (await session.run_code("1")).artifacts == []


async def test_output_streams_while_the_code_runs(session: LocalSession) -> None:
    chunks: list[tuple[str, str]] = []
    result = await session.run_code(
        "import sys, time\nfor i in range(3):\n    print(i)\n    time.sleep(0.05)\n"
        "sys.stderr.write('e')",
        on_output=lambda stream, text: chunks.append((stream, text)),
    )
    assert result.ok
    assert "".join(text for stream, text in chunks if stream == "stdout") == "0\n1\n2\n"
    assert ("stderr", "e") in chunks
    assert len([c for c in chunks if c[0] == "stdout"]) >= 3


async def test_env_applies_to_one_call(session: LocalSession) -> None:
    during = await session.run_code(
        "import os\nrepr(os.environ.get('ONLY_NOW'))", env={"ONLY_NOW": "1"}
    )
    assert during.value == repr("'1'")
    after = await session.run_code("repr(os.environ.get('ONLY_NOW'))")
    assert after.value == repr("None")


async def test_variables_round_trip_through_kernel_state(session: LocalSession) -> None:
    await session.run_code(
        "import json\ndata = {'a': [1, 2]}\ndef greet(n):\n    return 'hi ' + n\n"
    )
    dump = await session.run_code("gen = (i for i in range(3))")
    assert dump.ok
    variables = await session.dump_variables()
    assert {"json", "data", "greet"} <= set(variables.saved)
    assert "gen" in variables.skipped
    await session.run_code("del data, greet, json")
    assert await session.load_variables(variables.data) == {}
    restored = await session.run_code("greet(json.dumps(data))")
    assert restored.value == repr('hi {"a": [1, 2]}')


async def test_cell_sources_reach_inspect_and_traceback(session: LocalSession) -> None:
    # The first cell imports inspect (and so linecache) itself: its own source must be there.
    result = await session.run_code(
        "import inspect\ndef helper():\n    return 'body'\ninspect.getsource(helper)"
    )
    assert result.value == repr("def helper():\n    return 'body'\n")
    printed = await session.run_code(
        "import traceback\ntry:\n    helper(1)\nexcept TypeError:\n    traceback.print_exc()"
    )
    assert "helper(1)" in printed.stderr


async def test_a_forged_reply_kills_the_worker_and_the_session_goes_on(
    session: LocalSession,
) -> None:
    # Sandboxed code can find its own request's id in the worker's frames and the event pipe in
    # its argv: a targeted forgery of its own reply. The worker's real reply follows it before
    # the fence's: the host kills the worker and says so (tests/security/test_forged_results.py).
    forge = (
        "import os, sys\n"
        "frame = sys._getframe()\n"
        "while 'request_id' not in frame.f_locals:\n"
        "    frame = frame.f_back\n"
        "argv = open('/proc/self/cmdline', 'rb').read().split(b'\\0')\n"
        'line = b\'{"id": %d, "ev": "done", "error": {"bogus": 1}}\\n\'\n'
        "os.write(int(argv[5]), line % frame.f_locals['request_id'])\n"
    )
    result = await session.run_code(forge)
    assert result.error is not None
    assert result.error.name == "SandboxWorkerDied"
    assert "it sent a second reply to one request" in result.error.value
    assert (await session.run_code("1 + 1")).value == "2"


async def test_a_forked_child_does_not_take_over_the_worker(session: LocalSession) -> None:
    # The parent answers last, so a child that replied at all would be seen.
    forked = await session.run_code(
        "import os, time\npid = os.fork()\nif pid:\n    time.sleep(0.5)\n'parent' if pid else 'child'"
    )
    assert forked.value == repr("parent")
    for expected in range(3):
        assert (await session.run_code(f"{expected}")).value == str(expected)


async def test_a_failing_output_callback_does_not_break_the_session(
    session: LocalSession,
) -> None:
    def explode(stream: str, text: str) -> None:
        raise RuntimeError("callback bug")

    result = await session.run_code("print('still captured')", on_output=explode)
    assert result.stdout == "still captured\n"
    assert (await session.run_code("40 + 2")).value == "42"


async def test_tracebacks_show_no_host_path(session: LocalSession) -> None:
    assert session.launcher.worker_bytecode is not None  # the worker runs precompiled
    result = await session.run_code("import json\njson.loads('{')")
    assert result.error is not None
    assert result.error.name == "JSONDecodeError"
    assert "/opt/python/lib/python3" in result.error.traceback
    for host_path in (session.directory, _REPOSITORY, sys.prefix):
        assert host_path not in result.error.traceback


async def test_the_sandbox_runs_the_hosts_interpreter_exactly(session: LocalSession) -> None:
    # A relocated interpreter must load its own libpython, not another one the system has.
    inside = await session.run_code("import sys\nsys.version")
    assert inside.value == repr(sys.version)
    shell = await session.run_command("python3 -c 'import sys; print(sys.version)'")
    assert shell.stdout == sys.version + "\n"


async def test_a_dump_past_the_event_line_bound_keeps_the_worker(session: LocalSession) -> None:
    # 60 MB pickled is 80 MB of base64: one reply line used to exceed the event pipe's 64 MB
    # bound, and the worker was killed with every variable. It now travels in chunks.
    await session.run_code("big = b'x' * 60_000_000\nsmall = 1")
    dump = await session.dump_variables()
    assert dump.skipped == ()
    assert len(dump.data) > 60_000_000
    after = await session.run_code("len(big), small")
    assert after.value == "(60000000, 1)"
    assert after.notices == []
    # Past the session's limit (its largest file), the largest variable is left out, by name.
    await session.run_code("big = b'x' * 70_000_000")
    dump = await session.dump_variables()
    assert dump.skipped == ("big",)
    assert "66.8 MB" in dump.reasons["big"]
    assert (await session.run_code("len(big)")).value == "70000000"


async def test_a_timeout_traceback_shows_only_the_users_frames(session: LocalSession) -> None:
    result = await session.run_code("def spin():\n    while True:\n        pass\nspin()", timeout=1)
    assert result.timed_out
    assert result.error is not None
    assert result.error.name == "KeyboardInterrupt"
    frames = [line for line in result.error.traceback.splitlines() if line.startswith("  File ")]
    # The cell's two frames and nothing else: no frame of the worker's own SIGINT handler.
    assert frames == [
        '  File "<cell-1>", line 4, in <module>',
        '  File "<cell-1>", line 2, in spin',
    ]
    assert (await session.run_code("1 + 1")).value == "2"
