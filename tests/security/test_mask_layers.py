"""Each /proc mask of the local provider proven on its own: with that one mask removed from the
generated bwrap command line, sandboxed code reads the host kernel's file (or lists the
directory); with the mask it reads nothing. Both runs are made with the sandbox uid removed: most
of the files are root's, so the unprivileged sandbox uid masks them too. The masks are ``_MASKED_PROC_FILES`` and
``_MASKED_PROC_DIRS`` of ``_bubblewrap.py``; ``README.md`` in this directory has a row for each,
which ``test_every_mask_has_a_row`` holds against the code. A path this host's kernel does not
have is not masked (nor mounted over), and one the host reads as empty has nothing to hide: the
test skips those, naming the path.
"""

from __future__ import annotations

import os
import re
from pathlib import Path

import pytest

from langchain_sandbox.providers.local._bubblewrap import _MASKED_PROC_DIRS, _MASKED_PROC_FILES
from security.test_layers import PYTHON, README, _argv, _run, _without

_ROW = re.compile(r"^\| mask `(?P<path>[^`]+)` \| (?P<test>[^|]+) \|$")
MASKS = {
    match["path"]: match["test"].strip()
    for line in README.read_text().splitlines()
    if (match := _ROW.match(line.strip()))
}


def test_every_mask_has_a_row() -> None:
    assert set(MASKS) == {*_MASKED_PROC_FILES, *_MASKED_PROC_DIRS}
    for path, test in MASKS.items():
        assert test in globals(), f"{path}: no test {test!r} here"


def _without_mask(argv: list[str], path: str) -> list[str]:
    """``argv`` without the arguments that mount over ``path``."""
    for start, arg in enumerate(argv):
        if arg == "--ro-bind-data" and argv[start + 2] == path:
            # and the --perms that gives the masking file its mode, if any
            first = start - 2 if argv[start - 2 : start - 1] == ["--perms"] else start
            return argv[:first] + argv[start + 3 :]
        if argv[start : start + 4] == ["--tmpfs", path, "--remount-ro", path]:
            return argv[:start] + argv[start + 4 :]
    raise AssertionError(f"no mask of {path} in the command line")


_READ = (
    "import os, sys\n"
    "path = sys.argv[1]\n"
    "if os.path.isdir(path):\n"
    "    print(len(os.listdir(path)))\n"
    "else:\n"
    "    print(len(open(path, 'rb').read(4096)))\n"
)


def _host_reads(path: str) -> bool:
    if os.path.isdir(path):
        return bool(os.listdir(path))
    with open(path, "rb") as kernel_file:
        return bool(kernel_file.read(1))


@pytest.mark.parametrize("path", [*_MASKED_PROC_FILES, *_MASKED_PROC_DIRS])
@pytest.mark.parametrize("layer_on", [True, False], ids=["mask", "without-mask"])
def test_each_proc_mask_alone_keeps_the_host_kernels_file_out(
    tmp_path: Path, path: str, layer_on: bool
) -> None:
    """How many bytes (entries, for a directory) of ``path`` sandboxed code reads: none with the
    mask, the host kernel's without it. Most of these files are readable by root only, so both
    runs are made as the uid that owns them (the sandbox uid removed, which masks them too);
    every other layer stays on."""
    if os.geteuid() != 0:
        pytest.skip(
            "the files are root's: only a root caller can relax the sandbox uid to read them"
        )
    if not os.path.exists(path):
        pytest.skip(f"this kernel has no {path}, so it is not masked")
    if not _host_reads(path):
        pytest.skip(f"{path} is empty on this host too: nothing for the mask to hide")
    argv = _without(_argv(tmp_path, [PYTHON.sandbox_executable(), "-c", _READ, path]), "uid")
    if not layer_on:
        argv = _without_mask(argv, path)
    done = _run(argv, capture_output=True, text=True, timeout=60, check=True)
    read = int(done.stdout)
    assert (read == 0) is layer_on, done
