"""Proof that a member of the cluster wrote an engine's node or its tombstone.

Znodes are world-readable and, without a digest ACL, world-writable: any client that
reaches ZooKeeper can advertise an engine or forge a tombstone. Engines and the monitor
share the engine token, so an engine signs what it writes (HMAC-SHA256 under a key
derived from the token) over values that a copy cannot take to another node:

* its registration (``proof``): its id, its ``status_url`` and the ZooKeeper session
  that owns the node, which the monitor reads from the node's ``ephemeralOwner`` (set
  by ZooKeeper, never by the writer);
* its tombstone (``left_proof``, in the tombstone's data): its id and the ``czxid`` of
  the node that left, which the tombstone's name carries and no other node has.

A proof read from a znode is worthless anywhere else: another session owns any other
node, and another node has another czxid. A cluster with no engine token has no proof
(``netdisco check`` says what that allows).
"""

from __future__ import annotations

import hashlib
import hmac

#: what the key is for: the token itself is never used as the key of two things
_LABEL = b"netdisco znode proof 1"
#: a proof is this many hex digits (SHA-256); anything else is refused unread
PROOF_LENGTH = 64


def proof_key(token: str | None) -> bytes | None:
    """The signing key of a cluster whose engine token is ``token`` (None: no proof)."""
    if not token:
        return None
    return hmac.new(token.encode(), _LABEL, hashlib.sha256).digest()


def _sign(key: bytes, *parts: str) -> str:
    return hmac.new(key, "\n".join(parts).encode(), hashlib.sha256).hexdigest()


def engine_proof(key: bytes, engine_id: str, status_url: str, session: int) -> str:
    """The proof an engine writes into its node, owned by ``session``."""
    return _sign(key, "engine", engine_id, status_url, f"{session:x}")


def tombstone_proof(key: bytes, engine_id: str, czxid: int) -> str:
    """The proof an engine writes into the tombstone of its node ``czxid``."""
    return _sign(key, "left", engine_id, f"{czxid:x}")


def _same(given: object, wanted: str) -> bool:
    if not isinstance(given, str) or len(given) != PROOF_LENGTH:
        return False
    return hmac.compare_digest(given.encode(), wanted.encode())


def proves_engine(
    key: bytes, given: object, engine_id: str, status_url: str | None, session: int
) -> bool:
    """Whether ``given`` proves the node of ``engine_id`` owned by ``session``."""
    if status_url is None:
        return False
    return _same(given, engine_proof(key, engine_id, status_url, session))


def proves_tombstone(key: bytes, given: object, engine_id: str, czxid: int) -> bool:
    """Whether ``given`` proves the tombstone of node ``czxid`` of ``engine_id``."""
    return _same(given, tombstone_proof(key, engine_id, czxid))
