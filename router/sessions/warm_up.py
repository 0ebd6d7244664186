"""What a warm worker's browser does before anyone takes it: the one-time costs of its first real
page, paid ahead, off every client's path.

A browser that has only shown ``about:blank`` pays twice on its first real navigation (measured
here, @playwright/mcp 0.0.83 and chromium-headless-shell 156 on 2 cores: 100 ms against 82 for the
next ones, and +39 ms after 30 s idle): once in the tab's renderer, whose engine has never laid
out, styled or snapshotted a document (~+8 ms loading, ~+6 ms in the snapshot), and once for the
first http request of the whole browser and of node (network service and browser thread pools,
node compiling its navigate-over-http path, ~+15 ms). Neither is site isolation: the tab keeps
its renderer for the first site it loads. So the tab draws a document of its own (no site is
assigned to its process by that), and a second tab, closed again, makes the browser's first
http navigation; a warm-up navigation of the tab itself to another site would pin its renderer
to that site and cost the client a new process instead (+38 ms). With both, the first call
took 67 ms against 77 for the next ones, and the same after 30 s idle.
"""

from __future__ import annotations

import contextlib
import logging
from typing import Any, Final, Protocol

from router.sessions.control import ControlError

log = logging.getLogger("mcp_router.pool")

BLANK: Final = {"url": "about:blank"}
# Headings, text, a button, a form, a list and a link: what a page's first layout and snapshot
# meet; the height read forces the layout.
DRAW_DOCUMENT: Final = {
    "function": "() => { document.body.innerHTML = '<h1>Warm</h1><p>text <b>bold</b></p>"
    "<button>Press</button><form><label>Name <input name=n></label> <label>Mail <input type=email>"
    "</label></form><ul><li><a href=\"#a\">Item</a> <span>price</span></li></ul>';"
    " return document.body.getBoundingClientRect().height; }"
}


class ToolCaller(Protocol):
    """A control session (router/sessions/control.py), or a benchmark's client warming a direct
    worker the same way."""

    async def call(self, tool: str, arguments: dict[str, Any] | None = None) -> str: ...


async def warm_browser(control: ToolCaller, http_url: str) -> None:
    """The warm-up, on the first tab (left on ``about:blank``, selected) and a second one
    (``http_url``: any http page that answers; closed again). Raises ControlError only when
    the browser is not left as it was found."""
    await control.call("browser_navigate", BLANK)
    with contextlib.suppress(ControlError):  # a warm-up: a tool refused costs only its part
        await control.call("browser_evaluate", DRAW_DOCUMENT)
        await control.call("browser_snapshot")
    await control.call("browser_navigate", BLANK)
    await control.call("browser_tabs", {"action": "new"})
    try:
        await control.call("browser_navigate", {"url": http_url})
    except ControlError as exc:  # a browse policy that refuses it, say
        log.debug("warm-up navigation refused: %s", exc)
    finally:
        await control.call("browser_tabs", {"action": "close", "index": 1})
        await control.call("browser_tabs", {"action": "select", "index": 0})
