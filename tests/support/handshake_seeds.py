"""The start-up handshake probe, once per test run for each kind of worker.

A router probes its worker's handshake at start (router/sessions/handshake.py), which costs a
worker spawn: ~1 s for the stand-in (its imports), more for node. Tests start dozens of routers
with the same worker, so the first start's probe fills a seed and later starts store that seed in
their cache (through the cache's own ``store``) before they run: the answers a probe would have
got, since the worker is the same. The key is the worker as the router's fingerprint sees it, less
what differs per router (its state dir, its port) and plus the bytes of the files it runs.
The seeds live in the directory named by SEEDS_ENV (set for the run by tests/conftest.py); unset,
or with the probe turned off, nothing is seeded.
"""

from __future__ import annotations

import hashlib
import json
import os
from pathlib import Path
from typing import Any, Final

from router.settings import Settings
from router.types import HANDSHAKE_VERSIONS

SEEDS_ENV: Final = "MCP_ROUTER_TEST_HANDSHAKE_SEEDS"


def _seed_file(manager: Any, settings: Settings) -> Path | None:
    root = os.environ.get(SEEDS_ENV)
    if not root or not manager.probe_handshake:
        return None
    spec = manager.supervisor.spec
    worker = json.dumps([list(spec.argv_template), sorted(spec.env.items())])
    worker = worker.replace(str(settings.state_dir), "<state>").replace(f":{settings.port}", ":<port>")
    digest = hashlib.sha256(worker.encode())
    for token in spec.argv_template:
        if "{" not in token and Path(token).is_file():
            digest.update(Path(token).read_bytes())
    return Path(root) / f"{digest.hexdigest()[:32]}.json"


def seed(manager: Any, settings: Settings) -> bool:
    """Fills the router's handshake cache from the seed for its worker; False: there is none."""
    path = _seed_file(manager, settings)
    if path is None:
        return False
    try:
        versions = json.loads(path.read_text())
    except (OSError, ValueError):
        return False
    for version, entry in versions.items():
        manager.handshakes.store(version, entry["initialize"], entry["tools"])
    return True


def keep(manager: Any, settings: Settings) -> None:
    """After a router's own probe: its answers become the seed for its worker."""
    path = _seed_file(manager, settings)
    if path is None or path.exists():
        return
    versions = {version: manager.handshakes.get(version) for version in HANDSHAKE_VERSIONS}
    if any(entry is None for entry in versions.values()):
        return  # the probe failed or was cut short: later routers probe for themselves
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps(versions))
    os.replace(tmp, path)
