"""A `ToolHost` for tests of the tools-from-code channel itself (no LangChain tool behind it)."""

from __future__ import annotations

from typing import Any


class DoublingHost:
    """One tool, ``double(n)``, answered on the host with ``n * 2``."""

    specs = [{"name": "double", "params": ["n"]}]

    async def call(self, name: str, args: dict[str, Any]) -> dict[str, Any]:
        return {"ok": True, "value": args["n"] * 2}

    def notices(self) -> list[str]:
        return []
