"""`--version`, help that reads as plain text, `exec --file` / `exec -`, the labelled value."""

from __future__ import annotations

from importlib.metadata import version
from pathlib import Path

from .conftest import RunCli


def test_version_is_the_installed_distributions(run_cli: RunCli) -> None:
    done = run_cli("--version")
    assert done.returncode == 0
    assert done.stdout == f"langchain-sandbox {version('langchain-sandbox')}\n"


def test_top_level_help_has_no_rst_markup_and_shows_examples(run_cli: RunCli) -> None:
    done = run_cli("--help")
    assert done.returncode == 0
    assert "``" not in done.stdout
    assert ":data:" not in done.stdout
    assert "langchain-sandbox exec --file script.py" in done.stdout
    assert "--version" in done.stdout


def test_provider_and_doctor_have_help_text(run_cli: RunCli) -> None:
    exec_help = run_cli("exec", "--help").stdout
    assert "--provider {local,e2b,runloop,kubernetes}" in exec_help
    assert "where the code runs" in " ".join(exec_help.split())
    assert "--file PATH" in exec_help
    doctor_help = " ".join(run_cli("doctor", "--help").stdout.split())
    assert "Check what isolation the local provider has on this machine" in doctor_help
    gc_help = " ".join(run_cli("gc", "--help").stdout.split())
    assert "provider whose sandboxes to look at" in gc_help
    assert "--allow-empty-checkpointer" in gc_help


def test_exec_labels_the_value_apart_from_stdout(run_cli: RunCli) -> None:
    done = run_cli("exec", "print(42, end='')\n6 * 7")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "42\n[value] 42\n"
    silent = run_cli("exec", "x = 1")
    assert silent.stdout == ""


def test_exec_file_runs_the_files_code(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text("import sys\nprint('from a file')\nsys.version_info[0]\n")
    done = run_cli("exec", "--file", "script.py")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "from a file\n[value] 3\n"


def test_exec_file_missing_is_a_one_line_error(run_cli: RunCli) -> None:
    done = run_cli("exec", "--file", "nope.py")
    assert done.returncode == 2
    assert done.stderr == "error: Cannot read nope.py: No such file or directory\n"


def test_exec_code_and_file_together_is_a_usage_error(run_cli: RunCli, tmp_path: Path) -> None:
    (tmp_path / "script.py").write_text("1")
    done = run_cli("exec", "1", "--file", "script.py")
    assert done.returncode == 2
    assert "not allowed with argument" in done.stderr


def test_exec_dash_still_reads_standard_input(run_cli: RunCli) -> None:
    done = run_cli("exec", "-", stdin="print('from stdin')\n'value'\n")
    assert done.returncode == 0, done.stderr
    assert done.stdout == "from stdin\n[value] 'value'\n"


def test_timeout_traceback_shows_only_the_users_frames(run_cli: RunCli) -> None:
    done = run_cli("exec", "def spin():\n    while True:\n        pass\nspin()", "--timeout", "1")
    assert done.returncode == 124
    assert '  File "<cell-1>", line 2, in spin' in done.stderr
    assert "worker" not in done.stderr
    assert "_on_sigint" not in done.stderr
    assert done.stderr.count('  File "') == 2
    # "[timed out]" first, then where the run stopped: no KeyboardInterrupt traceback.
    assert done.stderr.startswith("[timed out]\nstopped in:\n")
    assert "KeyboardInterrupt" not in done.stderr
    assert "Traceback" not in done.stderr
