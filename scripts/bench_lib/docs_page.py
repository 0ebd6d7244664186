"""Where a bench report goes besides .bench/: docs/benchmarks.md, between its markers, and the line
that says which router was measured."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]
PAGE: Final = ROOT / "docs" / "benchmarks.md"
BEGIN: Final = "<!-- bench:begin (scripts/bench --update-docs writes from here) -->"
END: Final = "<!-- bench:end -->"


class MarkersMissing(Exception):
    """The page lacks its markers: nothing is written rather than a hand-written part lost."""


def router_source(src: Path | None, *, commit: bool = True) -> str:
    """Which router was measured: .bench/ names its commit; the docs name the checkout (history
    lives in git, not in the docs)."""

    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip()

    if src is not None:
        return f"source tree `{src}`" if commit else "another source tree"
    dirty = git("status", "--porcelain", "--untracked-files=no", "router", "workers")
    name = f"commit `{git('rev-parse', '--short', 'HEAD')}`" if commit else "this checkout"
    return name + (" + uncommitted changes" if dirty else "")


def update(text: str, page: Path = PAGE) -> None:
    """Replaces what lies between the page's markers with ``text``; the rest stays as written."""
    content = page.read_text()
    start, end = content.find(BEGIN), content.find(END)
    if start < 0 or end < start:
        raise MarkersMissing(f"{page} has no {BEGIN!r} … {END!r} pair")
    head = content[: start + len(BEGIN)]
    page.write_text(f"{head}\n\n{text.strip()}\n\n{content[end:]}")
