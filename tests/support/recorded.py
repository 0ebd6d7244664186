"""Fixtures of the recorder tests: a temp database, a running Recorder, and real @playwright/mcp
answers (tests/support/answers) with their linked files placed in a temp output dir."""

from __future__ import annotations

import json
import shutil
import sqlite3
from collections.abc import AsyncIterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import pytest

from router.record.recorder import Recorder

DATA = Path(__file__).parent / "answers"
# Where the answers were captured: the worker ran with cwd /tmp/x and --output-dir /tmp/x/out.
CAPTURED_OUT = "/tmp/x/out/"


def query(db: Path, sql: str, params: Any = ()) -> list[tuple[Any, ...]]:
    """Rows read back from the record's file on a connection of the test's own."""
    conn = sqlite3.connect(db)
    try:
        return conn.execute(sql, params).fetchall()
    finally:
        conn.close()


@dataclass
class Answers:
    output_dir: Path
    by_name: dict[str, dict[str, Any]]  # the JSON-RPC messages, paths rewritten to output_dir

    def result(self, name: str) -> dict[str, Any]:
        result: dict[str, Any] = self.by_name[name]["result"]
        return result

    def file(self, prefix: str, index: int = 0) -> str:
        return sorted(self.output_dir.glob(f"{prefix}*"))[index].read_text()


def load_answers(kind: str, root: Path) -> Answers:
    """kind 'abs' (--file-paths absolute) or 'rel' (links relative to the worker cwd = root)."""
    out = root / "out"
    out.mkdir(parents=True, exist_ok=True)
    by_name = {}
    for f in sorted((DATA / kind).iterdir()):
        if f.suffix in (".yml", ".log"):
            shutil.copy(f, out / f.name)
        elif f.suffix == ".json":
            by_name[f.stem] = json.loads(f.read_text().replace(CAPTURED_OUT, f"{out}/"))
    return Answers(out, by_name)


@pytest.fixture
def answers(tmp_path: Path) -> Answers:
    return load_answers("abs", tmp_path / "worker")


@pytest.fixture
def db_path(tmp_path: Path) -> Path:
    return tmp_path / "state" / "router.db"


@pytest.fixture
async def recorder(db_path: Path) -> AsyncIterator[Recorder]:
    rec = Recorder(db_path)
    async with rec.run():
        yield rec
