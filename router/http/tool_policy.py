"""Which of the worker's tools a conversation sees and may call.

The router runs every worker with ``--caps storage,network`` for itself (saving and restoring
cookies and storage across workers; a route puts localStorage back in the resumed tab); those
tools stay hidden unless the user asked for the capability. Tools
that run arbitrary code or read local files are off unless allowed by name (``--allow-tool``);
``--deny-tool`` hides more. A hidden tool is absent from ``tools/list`` and refused on call.

When sessions share a browser (``--sessions-per-browser`` above 1, router/sessions/hosts.py),
``browser_run_code_unsafe`` stays hidden even when allowed by name: its code runs in the worker's
node process, where the whole browser is in reach, every session's context with its pages and
cookies, and the worker's file checks do not apply to it. Nothing the router can look at in the
call tells what that code will touch, so no session gets it.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass
from typing import Any, Final

from workers.spec import split_caps

# What ``--caps storage`` adds to @playwright/mcp 0.0.83.
STORAGE_CAP_TOOLS: Final = frozenset(
    {
        "browser_storage_state",
        "browser_set_storage_state",
        *(f"browser_cookie_{op}" for op in ("clear", "delete", "get", "list", "set")),
        *(f"browser_localstorage_{op}" for op in ("clear", "delete", "get", "list", "set")),
        *(f"browser_sessionstorage_{op}" for op in ("clear", "delete", "get", "list", "set")),
    }
)
# What ``--caps network`` adds.
NETWORK_CAP_TOOLS: Final = frozenset(
    {"browser_network_state_set", "browser_route", "browser_route_list", "browser_unroute"}
)
# Run code outside the page's sandbox, or read local files (a page could steer the model into
# uploading ~/.ssh/id_rsa): off unless allowed by name.
DANGEROUS_TOOLS: Final = frozenset({"browser_run_code_unsafe", "browser_file_upload"})
# Hidden whatever is allowed while sessions share a browser (see above).
SHARED_BROWSER_REFUSED: Final = frozenset({"browser_run_code_unsafe"})
SHARED_BROWSER_REASON: Final = (
    "it runs code in the browser worker's process, which reaches every context of the browser, and "
    "this router's sessions share browsers (--sessions-per-browser)"
)


def user_caps(worker_args: Iterable[str]) -> set[str]:
    """The ``--caps`` the user passed to the worker (``--caps a,b`` or ``--caps=a,b``)."""
    return set(split_caps(list(worker_args))[0])


@dataclass(frozen=True)
class ToolPolicy:
    hidden: frozenset[str] = frozenset()
    shared_browser: bool = False

    @classmethod
    def build(
        cls, *, worker_args: Iterable[str] = (), allow: Iterable[str] = (), deny: Iterable[str] = (),
        shared_browser: bool = False,
    ) -> ToolPolicy:  # fmt: skip
        """``shared_browser``: sessions share browser workers (``--sessions-per-browser`` > 1)."""
        hidden = set(DANGEROUS_TOOLS) | set(deny)
        caps = user_caps(worker_args)
        if "storage" not in caps:
            hidden |= STORAGE_CAP_TOOLS
        if "network" not in caps:
            hidden |= NETWORK_CAP_TOOLS
        hidden -= set(allow)
        if shared_browser:
            hidden |= SHARED_BROWSER_REFUSED
        return cls(frozenset(hidden), shared_browser)

    def allows(self, name: str | None) -> bool:
        return name not in self.hidden

    def refusal(self, name: str | None) -> str:
        """What a client is told when it calls the hidden tool ``name``."""
        refused = f"Tool {name!r} is not available through this router"
        if self.shared_browser and name in SHARED_BROWSER_REFUSED:
            return f"{refused}: {SHARED_BROWSER_REASON}"
        return refused

    def filter_list(self, result: Any) -> Any:
        """A ``tools/list`` result without the hidden tools (the worker's order kept)."""
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list) or not self.hidden:
            return result
        tools = [t for t in result["tools"] if not (isinstance(t, dict) and t.get("name") in self.hidden)]
        return {**result, "tools": tools}
