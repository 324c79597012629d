"""Variables through the runtime on the real local provider: what a snapshot leaves out is told to
the model when the step is saved, the step's files are saved whatever the variables hold, and a
new process gets back exactly what was saved."""

from __future__ import annotations

from pathlib import Path

from langchain_sandbox.runtime import SandboxRuntime
from langchain_sandbox.snapshots import LocalDirectoryBlobStore, Snapshotter


def _runtime(root: Path, sessions: str) -> SandboxRuntime:
    return SandboxRuntime(
        "local",
        provider_options={"base_dir": root / sessions},
        snapshotter=Snapshotter(LocalDirectoryBlobStore(root / "blobs")),
        persist="every_call",
    )


_STEP = (
    "import threading\n"
    "open('result.txt', 'w').write('saved')\n"
    "lock = threading.Lock()\n"
    "big = bytes(70 * 1024 * 1024)\n"  # pickled, past the 64 MB a snapshot's blob may take
    "kept = {'answer': 42}\n"
)


def test_variables_left_out_are_named_at_capture_and_the_step_is_saved(tmp_path: Path) -> None:
    with _runtime(tmp_path, "first") as runtime:
        outcome = runtime.run_code("t", _STEP)
        assert outcome.value.ok, outcome.value.render()
        told = [n for n in outcome.value.notices if "not saved with this snapshot" in n]
        assert len(told) == 1, outcome.value.notices
        # The reasons are the sandbox's words, quoted as such (guest_facts.variable_reasons).
        assert "big (the sandbox says: 'it takes 70.0 MB pickled" in told[0]
        assert (
            """lock (the sandbox says: "TypeError: cannot pickle '_thread.lock' object")"""
            in (told[0])
        )
        assert outcome.record["snapshot"] is not None
        assert not any("Could not save a snapshot" in n for n in outcome.value.notices)
        # The live session keeps everything, and the same notice is not repeated every call.
        again = runtime.run_code("t", "len(big), lock.locked()", record=outcome.record)
        assert again.value.value == f"({70 * 1024 * 1024}, False)"
        assert not any("not saved with this snapshot" in n for n in again.value.notices)
        record = again.record

    with _runtime(tmp_path, "second") as runtime:
        restored = runtime.run_code(
            "t",
            "(open('result.txt').read(), kept['answer'], 'big' in globals(), 'lock' in globals())",
            record=record,
        )
        assert restored.value.value == "('saved', 42, False, False)"
        lost = [n for n in restored.value.notices if "could not be restored" in n]
        assert len(lost) == 1
        assert "big, lock" in lost[0]
