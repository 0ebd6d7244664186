"""Which router host owns a session id, when several run behind one balancer (--node-id).

A node mints ``<node>.<random>`` (router/sessions/table.py) so that nginx, HAProxy or Envoy route
every later request by a prefix of ``Mcp-Session-Id`` alone, with no shared store on the hot
path. A request carrying another node's id reached the wrong host: it gets 421 naming the owner,
never a 404 (a client would silently start over) nor a lookup on this node's disk.
"""

from __future__ import annotations

import re
from typing import Final

from router.errors import WrongNode
from router.sessions.table import NODE_SEPARATOR

# A DNS label (a StatefulSet pod name fits): starts with a letter or digit, so an id never starts
# with "-", and holds no ".", so the first "." of an id ends the node id.
NODE_ID_RE: Final = re.compile(r"[A-Za-z0-9](?:[A-Za-z0-9_-]{0,61}[A-Za-z0-9])?")


def check_node_id(node_id: str) -> str:
    if not NODE_ID_RE.fullmatch(node_id):
        raise ValueError(
            f"node id {node_id!r}: 1-63 letters, digits, '-' or '_', starting and ending with a letter or digit"
        )
    return node_id


def owner_of(session_id: str) -> str | None:
    """The node id a session id names, or None for an id minted without one."""
    node, separator, _ = session_id.partition(NODE_SEPARATOR)
    return node if separator and NODE_ID_RE.fullmatch(node) else None


def check_owner(session_id: str, node_id: str | None) -> None:
    """Raises WrongNode when ``session_id`` names a node other than ``node_id``. Ids without a
    node (minted before --node-id was set) stay this node's, and a node without an id owns all."""
    if node_id is None:
        return
    owner = owner_of(session_id)
    if owner is not None and owner != node_id:
        raise WrongNode(
            f"Session belongs to router node {owner!r}, not {node_id!r}: "
            "route requests by the Mcp-Session-Id prefix",
            data={"node": owner, "this_node": node_id},
        )
