"""Where a bench report goes besides .bench/: the README's Benchmarks section, and the line that
says which router was measured."""

from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Final

ROOT: Final = Path(__file__).resolve().parents[2]


def router_source(src: Path | None) -> str:
    def git(*args: str) -> str:
        done = subprocess.run(["git", "-C", str(ROOT), *args], capture_output=True, text=True)
        return done.stdout.strip()

    if src is not None:
        return f"source tree `{src}`"
    dirty = git("status", "--porcelain", "--untracked-files=no", "router", "workers")
    return f"commit `{git('rev-parse', '--short', 'HEAD')}`" + (" + uncommitted changes" if dirty else "")


def update(text: str, command: str) -> None:
    readme = ROOT / "README.md"
    content = readme.read_text()
    head = "## Benchmarks\n"
    start = content.index(head) + len(head)
    nxt = content.find("\n## ", start)
    end = len(content) if nxt < 0 else nxt + 1
    if "### Router profile" in text:  # the profile stays in .bench/latest.md
        start_p = text.index("### Router profile")
        after = text.find("### ", start_p + 4)
        text = text[:start_p] + (text[after:] if after >= 0 else "")
    section = (
        f"\n`scripts/bench` (set-up, then about 13 minutes; `--quick` for about 3) measures the router "
        f"against a Playwright worker used directly and against supergateway, on a local test page, and "
        f"writes `.bench/latest.md`; `scripts/bench --update-readme` also refreshes this section. "
        f"Each timed phase starts once the machine is quiet (at most 20 % busy over half a second, "
        f"waiting up to 30 s), so that one phase's teardown is not measured as the next one's router. "
        f"The run below: `{command}`.\n\n{text}"
    )
    readme.write_text(content[:start] + section + ("\n" + content[end:] if nxt >= 0 else ""))
