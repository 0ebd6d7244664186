"""RouterError carries the id of the request that failed, so the error body answers it."""

from __future__ import annotations

import json

from router.errors import BadRequest, RouterError, ServiceUnavailable


def _body_id(exc: RouterError, *args: object) -> object:
    return json.loads(bytes(exc.response(*args).body))["id"]  # type: ignore[arg-type]


def test_request_id_is_a_field_the_response_answers() -> None:
    exc = BadRequest("bad", request_id=7)
    assert exc.request_id == 7
    assert _body_id(exc) == 7
    assert _body_id(BadRequest("bad")) is None


def test_request_id_can_be_learnt_after_the_raise_and_response_id_still_overrides() -> None:
    exc = ServiceUnavailable("full", retry_after=3)
    exc.request_id = "abc"
    response = exc.response()
    assert json.loads(bytes(response.body))["id"] == "abc"
    assert response.status_code == 503 and response.headers["retry-after"] == "3"
    assert _body_id(exc, 9) == 9
