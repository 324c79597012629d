"""The package as a user installs it: a wheel built from this tree, installed into a clean venv.

The venv gets the wheel and its declared core dependencies only (resolved with the project's
constraints), so it is also the real "without the extras" environment: the demo without
``langchain`` and ``gc`` without the SQLite driver must say what to install, in one line.
"""

from __future__ import annotations

import subprocess
import sys
import zipfile
from dataclasses import dataclass
from email.parser import Parser
from pathlib import Path

import pytest
from source_tree import built_once, source_tree

ROOT = Path(__file__).resolve().parents[2]
# The build (a wheel, a venv, its install) runs in the first test's set-up, or that test waits for
# another xdist worker's: 300 s was too short for it on two loaded cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


@dataclass
class Installed:
    wheel: Path
    build_output: str
    venv: Path

    def run(self, *args: str, cwd: Path) -> subprocess.CompletedProcess[str]:
        return subprocess.run(
            [str(self.venv / "bin" / "langchain-sandbox"), *args],
            capture_output=True,
            text=True,
            timeout=120,
            cwd=cwd,
            env={"PATH": "/usr/bin:/bin", "LANGCHAIN_SANDBOX_HOME": str(cwd / "home")},
        )


def _run(*command: str | Path, cwd: Path) -> str:
    done = subprocess.run(
        [str(part) for part in command], capture_output=True, text=True, timeout=900, cwd=cwd
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    return done.stdout + done.stderr


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Installed:
    def build(work: Path) -> None:
        source = source_tree(work)
        output = _run(
            sys.executable, "-m", "pip", "wheel", "--no-deps", "-w", work, source, cwd=work
        )
        (work / "build-output.txt").write_text(output)
        (wheel,) = work.glob("langchain_sandbox-*.whl")
        _run(sys.executable, "-m", "venv", work / "venv", cwd=work)
        constraints = ROOT / ".ci" / "constraints.txt"
        _run(work / "venv" / "bin" / "pip", "install", "-q", "-c", constraints, wheel, cwd=work)

    work = built_once(tmp_path_factory, "wheel", build)
    (wheel,) = work.glob("langchain_sandbox-*.whl")
    output = (work / "build-output.txt").read_text()
    return Installed(wheel=wheel, build_output=output, venv=work / "venv")


def test_the_installed_command_prints_the_projects_version(
    installed: Installed, tmp_path: Path
) -> None:
    done = installed.run("--version", cwd=tmp_path)
    assert done.returncode == 0, done.stderr
    project = (ROOT / "pyproject.toml").read_text()
    assert f'version = "{done.stdout.split()[1]}"' in project
    assert done.stdout.startswith("langchain-sandbox ")


def test_the_wheel_carries_license_urls_and_classifiers(installed: Installed) -> None:
    with zipfile.ZipFile(installed.wheel) as wheel:
        names = wheel.namelist()
        (metadata_name,) = [n for n in names if n.endswith(".dist-info/METADATA")]
        metadata = Parser().parsestr(wheel.read(metadata_name).decode())
    assert metadata["License-Expression"] == "MIT"
    assert any(n.endswith(".dist-info/licenses/LICENSE") for n in names)
    assert "langchain_sandbox/py.typed" in names
    urls = dict(u.split(", ", 1) for u in metadata.get_all("Project-URL"))
    assert {"Homepage", "Documentation", "Repository", "Issues"} <= urls.keys()
    assert "Typing :: Typed" in metadata.get_all("Classifier")
    assert {"agents", "e2b", "runloop", "postgres", "sqlite", "notebooks"} <= set(
        metadata.get_all("Provides-Extra")
    )
    # setuptools warned three times per install about the old license table; not any more.
    assert "deprecat" not in installed.build_output.lower()


def test_the_demo_without_langchain_says_what_to_install(
    installed: Installed, tmp_path: Path
) -> None:
    done = installed.run("demo", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "error: The demo needs the 'langchain' package, which is not installed. "
        "Install it with: pip install 'langchain-sandbox[agents]'\n"
    )


def test_gc_on_sqlite_without_its_driver_says_what_to_install(
    installed: Installed, tmp_path: Path
) -> None:
    (tmp_path / "agent.sqlite").touch()
    done = installed.run("gc", "--checkpointer", "sqlite:///agent.sqlite", cwd=tmp_path)
    assert done.returncode == 2
    assert done.stderr == (
        "error: A sqlite:/// checkpointer needs the 'langgraph-checkpoint-sqlite' package, "
        "which is not installed. Install it with: pip install 'langchain-sandbox[sqlite]'\n"
    )
