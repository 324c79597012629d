"""The test kit's forked Python processes (``forked_python``): a child forked from the zygote
behaves as ``python script.py`` / ``python -m module`` in a new interpreter would, for everything
the durable-session tests rely on."""

from __future__ import annotations

import json
import os
import signal
import subprocess
import sys
import textwrap
from pathlib import Path

import forked_python
import pytest

PY = sys.executable

REPORT = """
import json, os, sys
print(json.dumps({
    "name": __name__, "argv": sys.argv, "cwd": os.getcwd(), "path0": sys.path[0],
    "env": dict(os.environ), "pid": os.getpid(), "ppid": os.getppid(), "pgid": os.getpgrp(),
    "preloaded": "langgraph.checkpoint.sqlite" in sys.modules,
}))
sys.exit(int(sys.argv[1]) if len(sys.argv) > 1 else 0)
"""


def script(directory: Path, source: str, name: str = "child.py") -> str:
    path = directory / name
    path.write_text(textwrap.dedent(source))
    return str(path)


def test_a_script_runs_as_main_with_its_argv_env_cwd_and_exit_code(tmp_path: Path) -> None:
    (tmp_path / "bin").mkdir()
    child = script(tmp_path / "bin", REPORT)
    env = {k: v for k, v in os.environ.items() if k != "USER"} | {"ONLY_HERE": "yes"}
    done = forked_python.run([PY, child, "7"], capture_output=True, env=env, cwd=tmp_path)
    assert done.returncode == 7, done.stderr
    report = json.loads(done.stdout)
    assert report["name"] == "__main__"
    assert report["argv"] == [child, "7"]
    assert report["cwd"] == str(tmp_path)
    assert report["path0"] == str(tmp_path / "bin")
    assert report["env"] == env  # replaced, not merged: USER is gone
    assert report["preloaded"]  # forked after the imports, not a new interpreter
    zygote = forked_python._the_zygote().process.pid
    assert report["pid"] not in (os.getpid(), zygote)
    assert report["ppid"] == zygote
    assert report["pgid"] == os.getpgrp()  # the zygote's group is the test's


def test_a_module_runs_as_main_with_the_working_directory_first_on_the_path(
    tmp_path: Path,
) -> None:
    module = script(tmp_path, REPORT, "forked_mod.py")
    done = forked_python.run([PY, "-m", "forked_mod", "0", "x"], capture_output=True, cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    report = json.loads(done.stdout)
    assert (report["name"], report["argv"], report["path0"]) == (
        "__main__",
        [module, "0", "x"],
        str(tmp_path),
    )
    assert report["env"] == dict(os.environ)  # env=None: the test process's environment


def test_pipes_communicate_and_a_timeout_that_kills(tmp_path: Path) -> None:
    echo = script(
        tmp_path,
        """
        import sys
        data = sys.stdin.read()
        print(data.upper(), end="")
        print("to stderr", file=sys.stderr)
        """,
    )
    proc = forked_python.popen(
        [PY, echo], stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=subprocess.PIPE
    )
    assert proc.communicate("hello\nworld\n", timeout=60) == ("HELLO\nWORLD\n", "to stderr\n")
    assert proc.returncode == 0

    sleeper = script(
        tmp_path,
        """
        import os, sys, time
        print(os.getpid(), flush=True)
        time.sleep(600)
        """,
        "sleeper.py",
    )
    proc = forked_python.popen([PY, sleeper], stdout=subprocess.PIPE)
    with pytest.raises(subprocess.TimeoutExpired):
        proc.communicate(timeout=0.5)
    assert proc.poll() is None
    proc.terminate()
    assert proc.wait(timeout=60) == -signal.SIGTERM

    with pytest.raises(subprocess.TimeoutExpired) as expired:
        forked_python.run([PY, sleeper], capture_output=True, timeout=1)
    pid = int(str(expired.value.stdout).split()[0])
    assert not Path(f"/proc/{pid}").exists()  # killed and reaped


def test_sigkill_gives_minus_nine_and_the_zygote_lives_on(tmp_path: Path) -> None:
    sleeper = script(tmp_path, "import time\nprint('ready', flush=True)\ntime.sleep(600)\n")
    proc = forked_python.popen([PY, sleeper], stdout=subprocess.PIPE, stderr=subprocess.PIPE)
    assert proc.stdout is not None
    assert proc.stdout.readline() == "ready\n"
    os.kill(proc.pid, signal.SIGKILL)
    proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGKILL
    proc.kill()  # after the death: nothing happens, as with Popen
    assert forked_python._the_zygote().process.poll() is None
    after = script(tmp_path, "print('after')\n", "after.py")
    assert forked_python.run([PY, after], capture_output=True).stdout == "after\n"


def test_an_uncaught_exception_prints_its_traceback_and_exits_1(tmp_path: Path) -> None:
    child = script(tmp_path, "def fail():\n    raise ValueError('boom')\nfail()\n")
    done = forked_python.run([PY, child], capture_output=True)
    assert done.returncode == 1
    assert "Traceback (most recent call last)" in done.stderr
    assert done.stderr.rstrip().endswith("ValueError: boom")
    assert f'File "{child}", line 2, in fail' in done.stderr


def test_shutdown_joins_threads_runs_atexit_and_flushes(tmp_path: Path) -> None:
    child = script(
        tmp_path,
        """
        import atexit, sys, threading, time
        atexit.register(lambda: print("atexit"))
        threading.Thread(target=lambda: (time.sleep(0.3), print("thread"))).start()
        sys.stdout.write("unflushed main ")
        """,
    )
    done = forked_python.run([PY, child], capture_output=True)
    assert (done.returncode, done.stdout) == (0, "unflushed main thread\natexit\n")


def test_children_draw_their_own_random_numbers_and_faulthandler_follows_the_env(
    tmp_path: Path,
) -> None:
    child = script(
        tmp_path, "import faulthandler, random\nprint(random.random(), faulthandler.is_enabled())\n"
    )
    first, second = (forked_python.run([PY, child], capture_output=True).stdout for _ in "ab")
    assert first.split()[0] != second.split()[0]
    env = {k: v for k, v in os.environ.items() if k != "PYTHONFAULTHANDLER"}
    assert forked_python.run([PY, child], capture_output=True, env=env).stdout.split()[1] == "False"
    env["PYTHONFAULTHANDLER"] = "1"
    assert forked_python.run([PY, child], capture_output=True, env=env).stdout.split()[1] == "True"


def test_what_a_fork_could_not_honour_is_refused(tmp_path: Path) -> None:
    child = script(tmp_path, "pass\n")
    with pytest.raises(ValueError, match="PYTHONPATH"):
        forked_python.run([PY, child], env={**os.environ, "PYTHONPATH": str(tmp_path)})
    with pytest.raises(ValueError, match="script or -m"):
        forked_python.run([PY, "-c", "pass"])
    with pytest.raises(ValueError, match="not a command of this interpreter"):
        forked_python.run(["python3", child])
    with pytest.raises(ValueError, match="process group"):
        forked_python.popen([PY, child], start_new_session=True)


def test_no_preloaded_module_of_ours_reads_the_environment_at_import() -> None:
    """A variable a module of ours read at import would hold the zygote's value in every child;
    the zygote records the reads (third-party ones are checked per request instead)."""
    readers = forked_python._the_zygote().env_read
    ours = {key: who for key, who in readers.items() if any("langchain_sandbox" in m for m in who)}
    assert ours == {}
    assert "*" not in readers


def test_a_missing_script_is_reported_as_the_interpreter_does(tmp_path: Path) -> None:
    missing = str(tmp_path / "missing.py")
    forked = forked_python.run([PY, missing], capture_output=True)
    fresh = subprocess.run([PY, missing], capture_output=True, text=True, check=False)
    assert forked.returncode == fresh.returncode == 2
    assert forked.stderr == fresh.stderr
