"""The record keeps a worker's answer as the worker sent it: its result's own bytes, cut out of
the SDKs' compact form (router/record/tools.py raw_member), never a re-encoding of it."""

from __future__ import annotations

import json

import pytest

from router.record.tools import raw_member

RESULT = {"content": [{"type": "text", "text": 'L’élève a écrit « déjà vu », "quoted", a\\nb'}]}


@pytest.mark.parametrize("answer_id", [7, -1, "abc", 'a"b'])
def test_the_result_of_a_compact_answer_is_its_own_bytes(answer_id: object) -> None:
    result = json.dumps(RESULT, ensure_ascii=False, separators=(",", ":")).encode()
    payload = b'{"result":' + result + b',"jsonrpc":"2.0","id":' + json.dumps(answer_id).encode() + b"}\n"
    assert raw_member(payload, "result") == result
    assert raw_member(payload, "error") is None


def test_an_error_is_cut_out_the_same_way() -> None:
    payload = b'{"error":{"code":-32602,"message":"bad"},"jsonrpc":"2.0","id":3}'
    assert raw_member(payload, "error") == b'{"code":-32602,"message":"bad"}'


@pytest.mark.parametrize(
    "payload",
    [
        b'{"jsonrpc":"2.0","id":1,"result":{"content":[]}}',  # members in another order
        b'{"result":{"x":{"y":1,"jsonrpc":"2.0","id":1}},"id":1,"jsonrpc":"2.0"}',  # the tail inside the result
        b'{"result":{"content":[]},"jsonrpc":"2.0","id":1,"extra":true}',  # more after the id
        b'{ "result": {"content": []}, "jsonrpc": "2.0", "id": 1}',  # not compact
        b'{"result":{"content":[]},"jsonrpc":"2.0","id":1}}',  # one brace too many
    ],
)
def test_any_other_form_is_encoded_as_before(payload: bytes) -> None:
    assert raw_member(payload, "result") is None
