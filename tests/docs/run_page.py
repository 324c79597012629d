"""Runs the blocks of one page, in page order, as the snippet test's child process.

Usage: ``python run_page.py BLOCKS.json``. Python blocks share one namespace; shell blocks run with
``bash -e`` in the same working directory. Line numbers in a traceback are the page's own.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path


def main(spec_path: str) -> int:
    spec = json.loads(Path(spec_path).read_text(encoding="utf-8"))
    namespace: dict[str, object] = {"__name__": "__main__"}
    for block in spec["blocks"]:
        print(f"=== {spec['page']}:{block['line']} ({block['language']})", flush=True)
        if block["language"] == "python":
            # Pad so that the page's line numbers appear in tracebacks. dont_inherit: a reader's
            # script does not get this file's `from __future__ import annotations`.
            source = "\n" * block["line"] + block["code"]
            exec(compile(source, spec["page"], "exec", dont_inherit=True), namespace)
            sys.stdout.flush()
        else:
            done = subprocess.run(["bash", "-e", "-o", "pipefail", "-c", block["code"]])
            if done.returncode != 0:
                print(
                    f"{spec['page']}:{block['line']}: the shell block exited {done.returncode}",
                    file=sys.stderr,
                )
                return 1
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1]))
