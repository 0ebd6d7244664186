"""Which of the worker's tools a conversation sees and may call.

The router runs every worker with ``--caps storage,network`` for itself (saving and restoring
cookies and storage across workers; a route puts localStorage back in the resumed tab); those
tools stay hidden unless the user asked for the capability. Tools
that run arbitrary code or read local files are off unless allowed by name (``--allow-tool``);
``--deny-tool`` hides more. A hidden tool is absent from ``tools/list`` and refused on call.
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


def user_caps(worker_args: Iterable[str]) -> set[str]:
    """The ``--caps`` the user passed to the worker (``--caps a,b`` or ``--caps=a,b``)."""
    return set(split_caps(list(worker_args))[0])


@dataclass(frozen=True)
class ToolPolicy:
    hidden: frozenset[str] = frozenset()

    @classmethod
    def build(
        cls, *, worker_args: Iterable[str] = (), allow: Iterable[str] = (), deny: Iterable[str] = ()
    ) -> ToolPolicy:
        hidden = set(DANGEROUS_TOOLS) | set(deny)
        caps = user_caps(worker_args)
        if "storage" not in caps:
            hidden |= STORAGE_CAP_TOOLS
        if "network" not in caps:
            hidden |= NETWORK_CAP_TOOLS
        return cls(frozenset(hidden - set(allow)))

    def allows(self, name: str | None) -> bool:
        return name not in self.hidden

    def filter_list(self, result: Any) -> Any:
        """A ``tools/list`` result without the hidden tools (the worker's order kept)."""
        if not isinstance(result, dict) or not isinstance(result.get("tools"), list) or not self.hidden:
            return result
        tools = [t for t in result["tools"] if not (isinstance(t, dict) and t.get("name") in self.hidden)]
        return {**result, "tools": tools}
