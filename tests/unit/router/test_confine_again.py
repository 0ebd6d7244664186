"""A call sent once more to another shared worker (its first died under it) names files in the
session's folder of that worker, not of the dead one (router/http/exchange.py confine_again)."""

from __future__ import annotations

import json
from pathlib import Path
from types import SimpleNamespace
from typing import Any

from router.http.exchange import Exchange, ExchangeHooks
from router.http.tool_policy import ToolPolicy
from router.layout import own_folder
from router.protocol.messages import parse
from router.record.ref_ids import RefIds


def test_a_resent_call_names_the_new_workers_folder(tmp_path: Path) -> None:
    first, second = (SimpleNamespace(output_dir=tmp_path / name) for name in ("first", "second"))
    hooks: Any = ExchangeHooks(
        recorder=None, metrics=None, tool_policy=ToolPolicy.build(shared_browser=True),
        cached_answer=lambda s, m: None, renew_browser=lambda s: None, on_tool_answer=lambda s, r, e: r,  # type: ignore[arg-type,return-value]
        ref_ids=RefIds(), shares_worker=lambda worker: True,
    )  # fmt: skip
    session: Any = SimpleNamespace(id="session-a", connection=SimpleNamespace(worker=first),
                                   roots=SimpleNamespace(known=None))  # fmt: skip
    body = {"jsonrpc": "2.0", "id": 7, "method": "tools/call",
            "params": {"name": "browser_take_screenshot", "arguments": {"filename": "shot.png"}}}  # fmt: skip
    exchange = Exchange(hooks, session, parse(json.dumps(body).encode()))
    assert exchange._refusal() is None

    def named() -> str:
        return str(json.loads(exchange.message.raw)["params"]["arguments"]["filename"])

    assert named() == str(own_folder(first.output_dir, "session-a") / "shot.png")
    exchange.confine_again(SimpleNamespace(worker=first))  # type: ignore[arg-type]
    assert named() == str(own_folder(first.output_dir, "session-a") / "shot.png")
    exchange.confine_again(SimpleNamespace(worker=second))  # type: ignore[arg-type]
    assert named() == str(own_folder(second.output_dir, "session-a") / "shot.png")
