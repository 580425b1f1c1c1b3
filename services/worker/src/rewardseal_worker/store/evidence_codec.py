"""How the worker stores evidence documents: deflated against a fixed dictionary.

An evidence document (canonical JSON, R-DIG-2) is mostly the same keys and enum names every
time, plus a salt and a few record ids: about 700 bytes, of which deflate with a dictionary of
those constant parts keeps about 120. Only the stored form changes; :func:`unpack` gives back
the exact bytes whose digest the receipt carries.

Stored forms, told apart by their first bytes (a document that is text never starts with NUL):

* ``b"\\x00D"`` + raw deflate against :data:`DICTIONARY_V1`;
* ``b"\\x00R"`` + the bytes as given (a value that itself starts with NUL);
* anything else: the bytes as given. Rows written before this codec existed are read as they
  are, so existing data dirs need no migration.

:data:`DICTIONARY_V1` can never change: stored rows depend on it. A better dictionary would be a
new marker.
"""

from __future__ import annotations

import zlib
from typing import Final

PACKED: Final = b"\x00D"
ESCAPED: Final = b"\x00R"

# The constant parts of evidence documents (rewardseal.core.judging's Decision.evidence), the most
# frequent last (deflate codes near distances more cheaply). Frozen: see the module docstring.
DICTIONARY_V1: Final = (
    b'"REWARD_OUTCOME_UNSCORED_RECONCILIATION_REQUIRED","REWARD_OUTCOME_HALTED_BEFORE_EFFECT",'
    b'"REWARD_OUTCOME_REFUTED","UNCERTAINTY_ORACLE_UNAVAILABLE","UNCERTAINTY_AMBIGUOUS",'
    b'"RUNTIME_SIGNAL_HALTED_BEFORE_EFFECT","RUNTIME_SIGNAL_FAILED","verdict":"INDETERMINATE"}'
    b',{"effect":"","kind":"forbidden","reason":"present","record_ids":["'
    b'"],"verdict":"CONFIRMED"},{"effect":"","kind":"forbidden","reason":"absent","record_ids":[]'
    b',"verdict":"REFUTED"}]}{"counts":{"confirmed":1,"credited_records":1,"forbidden":1,'
    b'"indeterminate":0,"new_records":1,"refuted":1,"required":1},"credited_record_ids":["'
    b'"],"oracle_error":null,"outcome":"REWARD_OUTCOME_VERIFIED","reason":"R-W-4 rule 5: every '
    b'required effect is confirmed","rule":5,"runtime_signal":"RUNTIME_SIGNAL_COMPLETED","salt":"'
    b'","schema":"rewardseal.evidence.v1","uncertainty":"UNCERTAINTY_NONE","verdicts":[{"effect"'
    b':"","kind":"required","reason":"confirmed","record_ids":["'
)

_WBITS: Final = -12
"""Raw deflate (no header) with a 4 KiB window: the dictionary plus a typical document."""
_MEM_LEVEL: Final = 4
"""Small compressor state: these documents are short, and a large state costs its setup."""


def pack(evidence: bytes) -> bytes:
    """The stored form of an evidence document (the smaller of deflated and as given)."""
    compressor = zlib.compressobj(
        6, zlib.DEFLATED, _WBITS, _MEM_LEVEL, zlib.Z_DEFAULT_STRATEGY, DICTIONARY_V1
    )
    packed = PACKED + compressor.compress(evidence) + compressor.flush()
    if len(packed) < len(evidence):
        return packed
    return ESCAPED + evidence if evidence.startswith(b"\x00") else evidence


def unpack(stored: bytes) -> bytes:
    """The evidence document from its stored form (see the module docstring).

    Raises:
        zlib.error: a packed value is corrupt.
    """
    if stored.startswith(PACKED):
        decompressor = zlib.decompressobj(_WBITS, DICTIONARY_V1)
        evidence = decompressor.decompress(stored[len(PACKED) :]) + decompressor.flush()
        if not decompressor.eof:
            raise zlib.error("truncated evidence")
        return evidence
    if stored.startswith(ESCAPED):
        return stored[len(ESCAPED) :]
    return stored
