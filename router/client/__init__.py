"""A typed Python client for the router: `BrowserSession` over its Streamable HTTP endpoint.

    from router.client import BrowserSession

    async with BrowserSession("http://127.0.0.1:4000/mcp", token=token) as browser:
        page = await browser.navigate("https://example.com")

Importing this package is cheap: the `mcp` SDK loads when the first session opens.
"""

from router.client._exceptions import (
    CallTimeout,
    ConnectionFailed,
    InvalidArgument,
    RequestRejected,
    RouterError,
    ServiceBusy,
    SessionExpired,
    ToolFailed,
)
from router.client.models import (
    ConsoleEntry,
    ConsoleMessages,
    Content,
    EvaluateResult,
    FormField,
    NavigateResult,
    PageResult,
    Screenshot,
    Snapshot,
    Tab,
    Tabs,
    ToolResult,
)
from router.client.session import DEFAULT_TIMEOUT, BrowserSession

__all__ = [
    "DEFAULT_TIMEOUT",
    "BrowserSession",
    "CallTimeout",
    "ConnectionFailed",
    "ConsoleEntry",
    "ConsoleMessages",
    "Content",
    "EvaluateResult",
    "FormField",
    "InvalidArgument",
    "NavigateResult",
    "PageResult",
    "RequestRejected",
    "RouterError",
    "Screenshot",
    "ServiceBusy",
    "SessionExpired",
    "Snapshot",
    "Tab",
    "Tabs",
    "ToolFailed",
    "ToolResult",
]
