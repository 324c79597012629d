"""The cookbooks run top to bottom, offline, with the scripted model, and show what they claim.

Each notebook runs where a user runs it: its kernel is a fresh virtualenv with exactly what the
notebook's first cell tells the user to install (``langchain-sandbox[extras]`` and ipykernel, no
dev extra). nbclient drives it from the test's venv, in a temporary working directory (the
committed notebook is not modified; its outputs are those of the same run).
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable
from pathlib import Path

import nbformat
import pytest
from jupyter_client.kernelspec import KernelSpecManager
from jupyter_client.manager import KernelManager
from nbclient import NotebookClient

COOKBOOK = Path(__file__).resolve().parent.parent / "cookbook"
_INSTALL = re.compile(r"pip install 'langchain-sandbox\[([a-z0-9,]+)\]' ipykernel")

# Hang guards: a test's set-up installs its notebook's venv (or waits for another xdist worker's
# install of the same), several at once under xdist on two loaded cores.
pytestmark = [pytest.mark.slow, pytest.mark.timeout(900)]


def stated_extras(notebook: nbformat.NotebookNode) -> str:
    """The extras the notebook's first cell tells the user to install."""
    first = notebook.cells[0]
    found = _INSTALL.search(first.source) if first.cell_type == "markdown" else None
    assert found, "the first cell must say what to pip install"
    return found.group(1)


def user_kernel(venv: Path, directory: Path) -> KernelManager:
    """A kernel manager whose kernel is ``venv``'s Python."""
    spec = directory / "kernels" / "user"
    spec.mkdir(parents=True)
    argv = [str(venv / "bin" / "python"), "-m", "ipykernel_launcher", "-f", "{connection_file}"]
    (spec / "kernel.json").write_text(
        json.dumps({"argv": argv, "display_name": "user venv", "language": "python"})
    )
    specs = KernelSpecManager(kernel_dirs=[str(spec.parent)])
    return KernelManager(kernel_name="user", kernel_spec_manager=specs)


def execute(name: str, workdir: Path, user_venv: Callable[..., Path]) -> tuple[str, list[str]]:
    """Run a notebook in a venv made from its stated requirements; return all its text output and
    the MIME types of its rich outputs."""
    notebook = nbformat.read(COOKBOOK / f"{name}.ipynb", as_version=4)
    venv = user_venv(stated_extras(notebook), "ipykernel")
    client = NotebookClient(
        notebook,
        km=user_kernel(venv, workdir.parent / f"{workdir.name}-kernel"),
        timeout=300,
        resources={"metadata": {"path": str(workdir)}},
    )
    client.execute()  # raises CellExecutionError, with the cell and traceback, if a cell fails
    texts: list[str] = []
    mimes: list[str] = []
    for cell in notebook.cells:
        for output in cell.get("outputs", []):
            if output.get("output_type") == "stream" and output.get("name") == "stdout":
                texts.append(output["text"])
            mimes.extend(output.get("data", {}))
    return "".join(texts), mimes


def test_quickstart(tmp_path: Path, user_venv: Callable[..., Path]) -> None:
    text, mimes = execute("quickstart", tmp_path, user_venv)
    assert "HOME = /home/user" in text
    assert "network: OSError" in text or "network: TimeoutError" in text
    assert "{'Jan': 120, 'Feb': 95, 'Mar': 143, 'Apr': 131, 'May': 160, 'Jun': 152}" in text
    assert "value:\n801" in text  # the two parallel calls used the first call's variable
    assert "value:\n'May'" in text
    assert "value:\n[0, 4, 8, 12, 16]" in text  # tools.fetch called 20 times from one code call
    # the key the code used through its placeholder: the API got the value, no message holds it
    assert "the key the code sees: __LANGCHAIN_SANDBOX_SECRET_WEATHER_API_KEY__" in text
    assert "{'city': 'Paris', 'forecast': 'sunny, 24 C'}" in text
    assert "403 langchain-sandbox egress proxy: example.com:80 is not allowed" in text
    assert "[notice] The network policy refused 1 request (HTTP 403)" in text
    assert "the API received the real key: True" in text
    assert "the real key in any message: False" in text
    assert "image/png" in mimes  # the chart, inline
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")  # and copied out


def test_durable_sessions(tmp_path: Path, user_venv: Callable[..., Path]) -> None:
    text, _ = execute("durable_sessions", tmp_path, user_venv)
    assert "{'ada': 4} turn 1" in text  # resumed in a "new process" from the snapshot
    assert "fork:     [notice] The sandbox was restored from the snapshot of revision 1." in text
    assert "saw: 1 one" in text
    assert "now: 2 two" in text
    assert "['stdout:\\npublished\\n', \"stdout:\\n'report\\\\n'\\n\"]" in text  # ran once
    assert "[['name', 'score'], ['ada', '3']]" in text  # the seeded file, found by the first turn


def test_providers(tmp_path: Path, user_venv: Callable[..., Path]) -> None:
    text, _ = execute("providers", tmp_path, user_venv)
    # the same agent and code on local, E2B and Runloop (emulated): same results, state kept
    assert "identical results on local, e2b and runloop: True" in text
    assert "value:\n('12.5 14.0 13.25 15.5', '/home/user')" in text
    assert "pause                         False     True     True" in text
    assert "network_control                True     True    False" in text
    # pause, then attach from a second process with the record alone (which holds no key)
    assert text.count("ran in another process: True") == 2
    assert "an API key in the record: True" not in text
    visits = "'visits': ['first process', 'second process']"
    assert "paused: True" in text  # E2B keeps memory: even the unpicklable lock
    assert "paused after the attach: False" in text
    assert (
        f"{visits}, 'lock kept': True, 'notes.txt': 'written before the pause'}} | notices: []"
    ) in text
    assert "status: suspended" in text  # Runloop keeps the disk and the picklable variables
    assert "status after the attach: running" in text
    assert (
        f"{visits}, 'lock kept': False, 'notes.txt': 'written before the pause'}} | notices: "
        "['Python variables were restored after the devbox resumed"
    ) in text
    # one thread moved local -> e2b -> runloop through the shared snapshot store
    assert "=== turn 2 on e2b (revision 2)" in text
    assert "=== turn 3 on runloop (revision 3)" in text
    assert "[notice] The sandbox was restored from the snapshot of revision 2." in text
    assert "([1, 2, 3], 'turn 1\\nturn 2\\nturn 3\\n')" in text
    # a warm run_code is one request on E2B and two on Runloop; nothing is left running
    assert re.search(r"^session\.run_code +1 +2$", text, re.MULTILINE)
    assert "sandboxes left: {'e2b': [], 'runloop': []}" in text


def test_services(tmp_path: Path, user_venv: Callable[..., Path]) -> None:
    text, _ = execute("services", tmp_path, user_venv)
    assert "Started in the background: web (running): python3 -u app.py" in text
    assert text.count("-> hello from the agent's app") == 2  # served before and after the resume
    assert "[notice] Services of this checkpoint were started again: 'web'" in text
    assert "[notice] Exposed ports (a new sandbox serves them at new URLs): 8000 at" in text
    assert "a new URL: True" in text


@pytest.mark.timeout(1800)  # hang guard: its venv (Deep Agents and its model SDKs) installs first
def test_deep_agents(tmp_path: Path, user_venv: Callable[..., Path]) -> None:
    text, _ = execute("deep_agents", tmp_path, user_venv)
    assert "first process killed: True" in text
    # the new process restored the files and the shell's directory and variable of the dead one
    assert "[notice] The sandbox was restored from the snapshot of revision 3." in text
    assert "total: 358 kEUR, in /home/user/report" in text
    assert "provider: e2b | live sandboxes: 1" in text
    assert "on e2b: total: 358 kEUR, in /home/user/report" in text


@pytest.mark.parametrize(
    "name", ["quickstart", "durable_sessions", "providers", "services", "deep_agents"]
)
def test_committed_notebooks_keep_their_outputs(name: str) -> None:
    notebook = nbformat.read(COOKBOOK / f"{name}.ipynb", as_version=4)
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code_cells)
    assert not any(o.get("output_type") == "error" for c in code_cells for o in c["outputs"])
