"""Credentials stay on the host side of the SDK; the SDK itself is an optional extra."""

from __future__ import annotations

import json
import logging
import subprocess
import sys
import textwrap

import pytest

from langchain_sandbox.errors import SandboxGoneError
from langchain_sandbox.providers.base import SessionSpec
from langchain_sandbox.providers.e2b import E2BProvider
from langchain_sandbox.testing.e2b_emulator import E2BEmulator

HOST_SECRET = "host-only-secret-VALUE-5150"


async def test_the_key_never_reaches_records_results_logs_or_the_sandbox(
    emulator: E2BEmulator, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    caplog.set_level(logging.DEBUG)
    key = emulator.api_key
    assert key is not None
    # The key comes from the SDK's own variable, as a user would set it.
    monkeypatch.setenv("E2B_API_KEY", key)
    monkeypatch.setenv("MY_HOST_TOKEN", HOST_SECRET)
    provider = E2BProvider(api_url=emulator.url, sandbox_url=emulator.url)
    session = await provider.create(SessionSpec(env={"VISIBLE": "yes"}))
    results = [
        await session.run_command("env"),
        await session.run_code("import os\ndict(os.environ)"),
        await session.run_code("raise RuntimeError('boom')"),
    ]
    assert "VISIBLE=yes" in results[0].stdout
    record = json.dumps(session.record)
    dump = await session.dump_variables()
    await session.pause()
    listed = json.dumps(await provider.list_sessions())
    emulator.expire(session.record["sandbox_id"])
    with pytest.raises(SandboxGoneError) as gone:
        await session.run_code("1")
    seen = "\n".join(
        [
            record,
            listed,
            repr(provider),
            repr(session),
            str(gone.value),
            json.dumps(gone.value.details),
            caplog.text,
            dump.data.decode("latin-1"),
            *(r.model_dump_json() for r in results),
        ]
    )
    assert key not in seen
    assert HOST_SECRET not in seen
    assert emulator.requests[0].body["envVars"] == {"VISIBLE": "yes"}  # only the spec's env


def _run_without_sdk(code: str) -> subprocess.CompletedProcess[str]:
    """Run ``code`` in a fresh interpreter where importing the E2B SDK fails."""
    blocker = textwrap.dedent(
        """
        import sys

        class _NoE2B:
            def find_spec(self, name, path=None, target=None):
                if name.split(".")[0] in ("e2b", "e2b_code_interpreter"):
                    raise ImportError(f"No module named {name!r} (blocked for the test)")
                return None

        sys.meta_path.insert(0, _NoE2B())
        """
    )
    return subprocess.run(
        [sys.executable, "-c", blocker + textwrap.dedent(code)],
        capture_output=True,
        text=True,
        timeout=120,
    )


def test_the_module_imports_without_the_sdk_and_building_names_the_extra() -> None:
    done = _run_without_sdk(
        """
        import langchain_sandbox.providers.e2b as e2b_module
        from langchain_sandbox.errors import MissingDependencyError
        from langchain_sandbox.providers import get_provider

        for build in (e2b_module.E2BProvider, lambda: get_provider("e2b")):
            try:
                build()
            except MissingDependencyError as exc:
                assert exc.extra == "e2b", exc.extra
                assert "pip install 'langchain-sandbox[e2b]'" in str(exc), str(exc)
            else:
                raise SystemExit("built without the SDK")
        assert "e2b" not in sys.modules and "e2b_code_interpreter" not in sys.modules
        print("ok")
        """
    )
    assert done.returncode == 0, done.stderr
    assert done.stdout.strip() == "ok"
