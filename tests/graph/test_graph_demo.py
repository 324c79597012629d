"""``langchain-sandbox demo`` runs end to end on the local provider with the scripted model."""

from __future__ import annotations

from pathlib import Path

from langchain_core.messages import AIMessage

from langchain_sandbox.demo import CHART_NAME, main, run_demo


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


def test_demo_main_exits_zero(tmp_path: Path, capsys: object) -> None:
    assert main(["--model", "scripted", "--output-dir", str(tmp_path)]) == 0
    assert (tmp_path / CHART_NAME).is_file()
