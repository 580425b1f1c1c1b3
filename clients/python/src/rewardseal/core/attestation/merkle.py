"""The receipts' Merkle tree: RFC 9162 §2.1 tree hashes and inclusion proofs (R-A-3).

Domain-separated SHA-256 (0x00 before a leaf, 0x01 before two child hashes), so no leaf can
pass for a node; hashes are written as lowercase hex.
"""

from __future__ import annotations

import hashlib
import secrets
from collections.abc import Sequence


def _leaf_hash(leaf: bytes) -> bytes:
    return hashlib.sha256(b"\x00" + leaf).digest()


def _node_hash(left: bytes, right: bytes) -> bytes:
    return hashlib.sha256(b"\x01" + left + right).digest()


def _split(size: int) -> int:
    """The largest power of two below ``size`` (``size`` > 1): where RFC 9162 splits a tree."""
    return 1 << ((size - 1).bit_length() - 1)


def _tree_hash(hashes: Sequence[bytes]) -> bytes:
    """MTH over leaf hashes (RFC 9162 §2.1.1); ``hashes`` is not empty."""
    if len(hashes) == 1:
        return hashes[0]
    k = _split(len(hashes))
    return _node_hash(_tree_hash(hashes[:k]), _tree_hash(hashes[k:]))


def merkle_root(leaves: Sequence[bytes]) -> str:
    """The RFC 9162 Merkle tree hash of ``leaves`` in their order, as lowercase hex; the hash of
    the empty string for no leaves."""
    if not leaves:
        return hashlib.sha256(b"").hexdigest()
    return _tree_hash([_leaf_hash(bytes(leaf)) for leaf in leaves]).hex()


def _path(hashes: Sequence[bytes], index: int) -> list[bytes]:
    if len(hashes) == 1:
        return []
    k = _split(len(hashes))
    if index < k:
        return [*_path(hashes[:k], index), _tree_hash(hashes[k:])]
    return [*_path(hashes[k:], index - k), _tree_hash(hashes[:k])]


def inclusion_proof(leaves: Sequence[bytes], index: int) -> list[str]:
    """The RFC 9162 inclusion path (§2.1.3.1) of ``leaves[index]``, each hash lowercase hex,
    from the leaf's sibling up.

    Raises:
        IndexError: ``index`` is outside ``0 .. len(leaves) - 1``.
    """
    if not 0 <= index < len(leaves):
        raise IndexError(f"leaf {index} is outside a tree of {len(leaves)}")
    return [node.hex() for node in _path([_leaf_hash(bytes(leaf)) for leaf in leaves], index)]


def verify_inclusion(leaf: bytes, index: int, size: int, proof: Sequence[str], root: str) -> bool:
    """Whether ``proof`` shows ``leaf`` at ``index`` in the tree of ``size`` leaves whose hash is
    ``root`` (RFC 9162 §2.1.3.2, step by step). A malformed hash gives False."""
    if not 0 <= index < size:  # step 1
        return False
    try:
        path = [bytes.fromhex(node) for node in proof]
        expected = bytes.fromhex(root)
    except (TypeError, ValueError):
        return False
    if any(len(node) != hashlib.sha256().digest_size for node in path):
        return False
    fn, sn = index, size - 1  # step 2
    result = _leaf_hash(bytes(leaf))  # step 3
    for node in path:  # step 4
        if sn == 0:  # 4a
            return False
        if fn & 1 or fn == sn:  # 4b
            result = _node_hash(node, result)
            if not fn & 1:
                while not fn & 1 and fn != 0:
                    fn >>= 1
                    sn >>= 1
        else:
            result = _node_hash(result, node)
        fn >>= 1  # 4c
        sn >>= 1
    return sn == 0 and secrets.compare_digest(result, expected)  # step 5
