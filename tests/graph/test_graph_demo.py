"""``langchain-sandbox demo`` runs end to end on the local provider with the scripted model."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import AIMessage

from langchain_sandbox.demo import _LOAD, CHART_NAME, _summary, main, run_demo
from langchain_sandbox.testing.scripted_model import ScriptedToolModel, call


def test_demo_runs_stateful_steps_parallel_calls_and_copies_the_chart(tmp_path: Path) -> None:
    lines: list[str] = []
    result = run_demo(tmp_path / "out", model="scripted", echo=lines.append)
    assert result.model == "scripted"
    assert result.chart == (tmp_path / "out" / CHART_NAME).resolve()
    assert result.chart.read_bytes().startswith(b"\x89PNG\r\n\x1a\n")
    parallel = [m for m in result.messages if isinstance(m, AIMessage) and len(m.tool_calls) == 2]
    assert len(parallel) == 1
    text = "\n".join(lines)
    assert "total = 801" in text  # computed from the variable the first step defined
    assert "best = May (160)" in text
    assert result.messages[-1].text.startswith("Done. total = 801; best = May (160)")
    assert f"chart saved to {result.chart}" in text
    # The sandbox ran in the default environment, built by this run or an earlier one.
    assert result.environment is not None
    assert result.environment.startswith(("built in", "reused"))
    assert f"sandbox environment 'default': {result.environment}" in text


def test_demo_reports_a_chart_that_was_not_made(tmp_path: Path) -> None:
    failing_chart = "import matplotlib\nmatplotlib.use('Agg')\nraise RuntimeError('no ink')"
    model = ScriptedToolModel(
        script=[
            call("sandbox_exec", code=_LOAD),
            call("sandbox_exec", code=failing_chart),
            _summary,
        ]
    )
    lines: list[str] = []
    result = run_demo(tmp_path / "out", model=model, echo=lines.append)
    assert result.chart is None
    assert not (tmp_path / "out" / CHART_NAME).exists()
    last = result.messages[-1].text
    assert "The chart is" not in last
    assert last.endswith("The chart could not be made (RuntimeError: no ink).")
    assert lines[-1] == "the agent made no chart (see the transcript)"


def test_demo_main_exits_zero(tmp_path: Path, capsys: object) -> None:
    assert main(["--model", "scripted", "--output-dir", str(tmp_path)]) == 0
    assert (tmp_path / CHART_NAME).is_file()
