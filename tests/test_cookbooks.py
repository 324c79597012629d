"""The cookbooks run top to bottom, offline, with the scripted model, and show what they claim.

Each notebook is executed with nbclient on the venv's ipykernel, in a temporary working directory
(the committed notebook is not modified; its outputs are those of the same run).
"""

from __future__ import annotations

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


@pytest.mark.parametrize("name", ["quickstart", "durable_sessions"])
def test_committed_notebooks_keep_their_outputs(name: str) -> None:
    notebook = nbformat.read(COOKBOOK / f"{name}.ipynb", as_version=4)
    code_cells = [c for c in notebook.cells if c.cell_type == "code"]
    assert all(c.get("execution_count") for c in code_cells)
    assert not any(o.get("output_type") == "error" for c in code_cells for o in c["outputs"])
