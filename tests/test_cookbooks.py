"""The cookbooks run top to bottom, offline, with the scripted model, and show what they claim.

Each notebook is executed with nbclient on the venv's ipykernel, in a temporary working directory
(the committed notebook is not modified; its outputs are those of the same run).
"""

from __future__ import annotations

import re
from pathlib import Path

import nbformat
import pytest
from nbclient import NotebookClient

COOKBOOK = Path(__file__).resolve().parent.parent / "cookbook"


def execute(name: str, workdir: Path) -> tuple[str, list[str]]:
    """Run a notebook; return all its text output and the MIME types of its rich outputs."""
    notebook = nbformat.read(COOKBOOK / f"{name}.ipynb", as_version=4)
    client = NotebookClient(
        notebook, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(workdir)}}
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


def test_quickstart(tmp_path: Path) -> None:
    text, mimes = execute("quickstart", tmp_path)
    assert "HOME = /home/user" in text
    assert "network: OSError" in text or "network: TimeoutError" in text
    assert "{'Jan': 120, 'Feb': 95, 'Mar': 143, 'Apr': 131, 'May': 160, 'Jun': 152}" in text
    assert "value:\n801" in text  # the two parallel calls used the first call's variable
    assert "value:\n'May'" in text
    assert "image/png" in mimes  # the chart, inline
    assert (tmp_path / "chart.png").read_bytes().startswith(b"\x89PNG")  # and copied out


def test_durable_sessions(tmp_path: Path) -> None:
    text, _ = execute("durable_sessions", tmp_path)
    assert "{'ada': 4} turn 1" in text  # resumed in a "new process" from the snapshot
    assert "fork:     [notice] The sandbox was restored from the snapshot of revision 1." in text
    assert "saw: 1 one" in text
    assert "now: 2 two" in text
    assert "['stdout:\\npublished\\n', \"stdout:\\n'report\\\\n'\\n\"]" in text  # ran once


def test_providers(tmp_path: Path) -> None:
    text, _ = execute("providers", tmp_path)
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


@pytest.mark.parametrize("name", ["quickstart", "durable_sessions", "providers"])
def test_committed_notebooks_keep_their_outputs(name: str) -> None:
    notebook = nbformat.read(COOKBOOK / f"{name}.ipynb", as_version=4)
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code_cells)
    assert not any(o.get("output_type") == "error" for c in code_cells for o in c["outputs"])
