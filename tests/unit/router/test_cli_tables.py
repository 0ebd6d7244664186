"""What `mcp-router sessions` prints of a running router's shared workers and hosted sessions."""

from __future__ import annotations

from router.cli.tables import format_hosts, format_sessions_table


def test_shared_workers_are_listed_with_their_sessions_places_and_memory() -> None:
    text = format_hosts([
        {"id": "host-aa", "pid": 41, "sessions": 3, "capacity_left": 17, "pss_bytes": 470 * 2**20},
        {"id": "host-bb", "pid": 42, "sessions": 0, "capacity_left": 20, "pss_bytes": None},
    ])  # fmt: skip
    header, _, first, second = text.splitlines()
    assert header.split() == ["HOST", "PID", "SESSIONS", "PLACES", "LEFT", "MEMORY"]
    assert first.split() == ["host-aa", "41", "3", "17", "470", "MiB"]
    assert second.split() == ["host-bb", "42", "0", "20", "-"]
    assert format_hosts([]) == "shared browsers: none running"


def test_a_hosted_sessions_memory_column_names_its_host() -> None:
    rows = [
        {"id": "s1", "state": "live", "worker_pid": 41, "worker_port": 1, "memory_bytes": None, "host": "host-aa"},
        {"id": "s2", "state": "live", "worker_pid": 43, "worker_port": 2, "memory_bytes": 300 * 2**20, "host": None},
    ]
    lines = format_sessions_table(rows).splitlines()
    assert lines[2].split()[-2:] == ["host", "host-aa"]
    assert lines[3].split()[-2:] == ["300", "MiB"]
