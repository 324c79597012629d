"""ExecutionResult rendering and bounded output capture."""

from __future__ import annotations

import base64

from langchain_sandbox.results import (
    Artifact,
    ExecutionError,
    ExecutionResult,
    OutputCapture,
    truncate_middle,
)


def test_render_keeps_head_and_tail_and_says_what_was_cut() -> None:
    stdout = "".join(f"line {i}\n" for i in range(10_000))
    text = ExecutionResult(stdout=stdout).render(max_chars=600)
    assert text.startswith("stdout:\nline 0\nline 1\n")
    assert "line 9999\n" in text
    assert "characters cut" in text
    assert len(text) < 1_000


def test_render_reports_failure_kinds_distinctly() -> None:
    err = ExecutionResult(
        error=ExecutionError(name="ZeroDivisionError", value="division by zero", traceback="tb"),
        exit_code=1,
    )
    assert err.render().startswith("[error] ZeroDivisionError: division by zero")
    assert not err.ok
    timed = ExecutionResult(timed_out=True, duration_ms=2500, exit_code=None)
    assert "[timed out after 2.5s" in timed.render()
    assert not timed.ok
    cmd = ExecutionResult(kind="command", exit_code=3)
    assert "[exit code 3]" in cmd.render()
    assert not cmd.ok


def test_warnings_on_stderr_are_not_a_failure() -> None:
    result = ExecutionResult(stdout="42\n", stderr="DeprecationWarning: old\n")
    assert result.ok
    text = result.render()
    assert "[error]" not in text
    assert "stderr:\nDeprecationWarning: old" in text


def test_value_notices_and_truncation_are_rendered() -> None:
    result = ExecutionResult(value="42", truncated=True, omitted_bytes=123).with_notices("restored")
    text = result.render()
    assert text.splitlines()[0] == "[notice] restored"
    assert "value:\n42" in text
    assert "123 bytes omitted" in text


def test_images_become_content_blocks_and_round_trip() -> None:
    png = b"\x89PNG\r\n\x1a\nfake"
    art = Artifact.from_bytes("figure_1.png", "image/png", png)
    result = ExecutionResult(artifacts=[art])
    blocks = result.to_content_blocks()
    assert blocks[0]["type"] == "text"
    assert "[artifact] figure_1.png (image/png)" in blocks[0]["text"]
    assert blocks[1] == {
        "type": "image",
        "base64": base64.b64encode(png).decode(),
        "mime_type": "image/png",
    }
    restored = ExecutionResult.model_validate(result.model_dump(mode="json"))
    assert restored.artifacts[0].to_bytes() == png


def test_output_capture_is_bounded_and_keeps_both_ends() -> None:
    capture = OutputCapture(limit=1000)
    for i in range(100_000):
        capture.write(f"{i:08d}\n".encode())
    assert capture.truncated
    assert capture.omitted == 100_000 * 9 - 1000
    text = capture.text()
    assert text.startswith("00000000\n")
    assert text.endswith("00099999\n")
    assert len(text.encode()) < 1100


def test_output_capture_small_output_is_exact() -> None:
    capture = OutputCapture(limit=10)
    capture.write("héllo".encode())
    capture.write(b"!")
    assert not capture.truncated
    assert capture.text() == "héllo!"


def test_truncate_middle_is_identity_when_short() -> None:
    assert truncate_middle("abc", 10) == "abc"
