"""The receipts' Merkle tree (R-A-3): RFC 9162 roots and inclusion proofs, checked against trees
drawn by hand for sizes 1..9 at every index, and proofs that lie (any flipped byte, another
index or leaf, one hash too many or too few, hashes out of order) refused."""

from __future__ import annotations

import hashlib

import pytest

from rewardseal.core.attestation import (
    LEAF_RULE,
    inclusion_proof,
    merkle_root,
    receipt_leaf,
    receipt_leaves,
    verify_inclusion,
)
from rewardseal.core.errors import AttestationError

# Each tree's shape written out by hand from RFC 9162 §2.1.1 (split at the largest power of two
# below n): an int is a leaf index, a pair is a node (left, right).
Tree = int | tuple["Tree", "Tree"]
SHAPES: dict[int, Tree] = {
    1: 0,
    2: (0, 1),
    3: ((0, 1), 2),
    4: ((0, 1), (2, 3)),
    5: (((0, 1), (2, 3)), 4),
    6: (((0, 1), (2, 3)), (4, 5)),
    7: (((0, 1), (2, 3)), ((4, 5), 6)),
    8: (((0, 1), (2, 3)), ((4, 5), (6, 7))),
    9: ((((0, 1), (2, 3)), ((4, 5), (6, 7))), 8),
}
LEAVES = [f"leaf-{n}".encode() for n in range(9)]


def sha(data: bytes) -> bytes:
    return hashlib.sha256(data).digest()


def tree_hash(tree: Tree) -> bytes:
    if isinstance(tree, int):
        return sha(b"\x00" + LEAVES[tree])
    return sha(b"\x01" + tree_hash(tree[0]) + tree_hash(tree[1]))


def contains(tree: Tree, index: int) -> bool:
    return tree == index if isinstance(tree, int) else any(contains(t, index) for t in tree)


def hand_path(tree: Tree, index: int) -> list[str]:
    """The siblings on the way from leaf ``index`` to the root, leaf end first."""
    if isinstance(tree, int):
        return []
    left, right = tree
    if contains(left, index):
        return [*hand_path(left, index), tree_hash(right).hex()]
    return [*hand_path(right, index), tree_hash(left).hex()]


CASES = [(size, index) for size in SHAPES for index in range(size)]


def test_the_empty_tree_is_the_hash_of_nothing() -> None:
    assert merkle_root([]) == hashlib.sha256(b"").hexdigest()


@pytest.mark.parametrize("size", sorted(SHAPES))
def test_root_matches_the_hand_drawn_tree(size: int) -> None:
    assert merkle_root(LEAVES[:size]) == tree_hash(SHAPES[size]).hex()


@pytest.mark.parametrize(("size", "index"), CASES)
def test_inclusion_proof_matches_the_hand_drawn_tree_and_verifies(size: int, index: int) -> None:
    proof = inclusion_proof(LEAVES[:size], index)
    assert proof == hand_path(SHAPES[size], index)
    root = tree_hash(SHAPES[size]).hex()
    assert verify_inclusion(LEAVES[index], index, size, proof, root)


@pytest.mark.parametrize(("size", "index"), CASES)
def test_a_lying_proof_is_refused(size: int, index: int) -> None:
    leaves = LEAVES[:size]
    proof = inclusion_proof(leaves, index)
    root = merkle_root(leaves)
    leaf = leaves[index]
    for position in range(len(proof)):
        for nibble in (0, 63):
            tampered = list(proof)
            digits = list(tampered[position])
            digits[nibble] = "0" if digits[nibble] != "0" else "1"
            tampered[position] = "".join(digits)
            assert not verify_inclusion(leaf, index, size, tampered, root)
    assert not verify_inclusion(leaf + b"x", index, size, proof, root)
    assert not verify_inclusion(leaf, index, size, proof, "00" * 32)
    assert not verify_inclusion(leaf, index, size, [*proof, "00" * 32], root)
    if proof:
        assert not verify_inclusion(leaf, index, size, proof[:-1], root)
        if len(proof) > 1:
            assert not verify_inclusion(leaf, index, size, proof[::-1], root)
    for other in range(size):
        if other != index and leaves[other] != leaf:
            assert not verify_inclusion(leaf, other, size, proof, root)
    assert not verify_inclusion(leaf, size, size, proof, root)
    assert not verify_inclusion(leaf, -1, size, proof, root)
    assert not verify_inclusion(leaf, index, size, ["not hex"], root)


def test_a_proof_for_a_leaf_outside_the_tree_is_an_error() -> None:
    with pytest.raises(IndexError):
        inclusion_proof(LEAVES[:3], 3)


def test_receipt_leaves_are_canonical_json_sorted_by_receipt_id() -> None:
    leaf = receipt_leaf("receipt.0001", "sha256:" + "a" * 64)
    assert leaf == b'{"envelope_digest":"sha256:' + b"a" * 64 + b'","receipt_id":"receipt.0001"}'
    leaves = receipt_leaves([("receipt.b", b"2"), ("receipt.a", b"1")])
    assert [b'"receipt.a"' in leaves[0], b'"receipt.b"' in leaves[1]] == [True, True]
    assert "sorted by receipt_id" in LEAF_RULE
    with pytest.raises(AttestationError, match="twice") as raised:
        receipt_leaves([("receipt.a", b"1"), ("receipt.a", b"2")])
    assert raised.value.reason == "malformed"
