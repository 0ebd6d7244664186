"""One client request's life: its ref_id, its record, and what the router does to its answer."""

from __future__ import annotations

import json
import time
import uuid
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from router.messages import ClientMessage
from router.sse import encode_event

if TYPE_CHECKING:
    from router.manager import SessionManager
    from router.sessions import Session


@dataclass(eq=False, slots=True)
class Exchange:
    manager: SessionManager
    session: Session
    message: ClientMessage
    ref_id: str = field(default_factory=lambda: str(uuid.uuid4()))
    started: float = field(default_factory=time.perf_counter)
    done: bool = False

    @classmethod
    def begin(cls, manager: SessionManager, session: Session, message: ClientMessage) -> Exchange:
        exchange = cls(manager, session, message)
        recorder = manager.recorder
        if recorder is not None:
            recorder.request(
                exchange.ref_id, session.id, message.method or "", message.tool_name, message.body.get("params")
            )
        return exchange

    async def local_answer(self) -> bytes | None:
        """The router's own answer when the request is for a router tool; None to forward it."""
        return None

    def answered_event(self, event: bytes, parsed: Any) -> bytes:
        """One SSE event of the worker's answer stream; the one holding our response is recorded."""
        if self.done or not self._is_our_response(parsed):
            return event
        replaced = self._complete(parsed)
        return event if replaced is None else encode_event(replaced)

    def answered_json(self, body: bytes) -> bytes:
        try:
            parsed = json.loads(body)
        except ValueError:
            return body
        if not self._is_our_response(parsed):
            return body
        replaced = self._complete(parsed)
        return body if replaced is None else replaced

    def failed(self, error: str) -> None:
        if self.done:
            return
        self.done = True
        recorder = self.manager.recorder
        if recorder is not None:
            recorder.response(self.ref_id, status="error", result=None, error=error, duration_ms=self._elapsed_ms())

    def _is_our_response(self, parsed: Any) -> bool:
        return (
            isinstance(parsed, dict)
            and parsed.get("id") == self.message.id
            and ("result" in parsed or "error" in parsed)
        )

    def _complete(self, response: dict[str, Any]) -> bytes | None:
        self.done = True
        recorder = self.manager.recorder
        if recorder is not None:
            result = response.get("result")
            error = response.get("error")
            is_error = error is not None or (isinstance(result, dict) and result.get("isError") is True)
            recorder.response(
                self.ref_id,
                status="error" if is_error else "success",
                result=json.dumps(result if error is None else error),
                error=json.dumps(error) if error is not None else None,
                duration_ms=self._elapsed_ms(),
            )
        return None

    def _elapsed_ms(self) -> float:
        return (time.perf_counter() - self.started) * 1000
