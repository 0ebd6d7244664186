"""The ref_ids the router gives requests (router/record/ref_ids.py): UUIDs in form, never repeated
within a run, and from a different random base in each run."""

from __future__ import annotations

import uuid

from router.record.ref_ids import RefIds


def test_ref_ids_are_version_4_uuids_and_never_repeat() -> None:
    ids = RefIds()
    given = [ids.next() for _ in range(1000)]
    assert len(set(given)) == len(given)
    for ref_id in given[:10]:
        parsed = uuid.UUID(ref_id)
        assert str(parsed) == ref_id
        assert parsed.version == 4 and parsed.variant == uuid.RFC_4122


def test_each_run_has_its_own_random_base() -> None:
    first, second = RefIds(), RefIds()
    assert first.next()[:23] != second.next()[:23]
