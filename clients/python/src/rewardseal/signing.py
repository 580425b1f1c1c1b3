"""Ed25519 keys, DSSE-style signed envelopes and certificate signatures (R-MSG-8, R-SIG-1/2).

Everything that rewardseal signs goes through this module:

* envelopes (receipts, revocation lists) are signed over the DSSE v1 pre-authentication encoding
  (:func:`pae`) of their payload type and the *exact* payload bytes, and are verified over those
  same bytes before anyone parses them;
* certificates (R-MSG-4) carry their signature inline, over the PAE of the RFC 8785 canonical JSON
  of every other field (:func:`certificate_signing_bytes`).

A :class:`TrustSet` is the only way to verify: it holds the public keys a reader trusts and
ignores signatures by anyone else.
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import secrets
import stat
from collections.abc import Iterable, Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from types import MappingProxyType
from typing import Final

import nacl.bindings
import nacl.exceptions
import nacl.signing
import rfc8785
from google.protobuf import json_format

from rewardseal.core.errors import SignatureError, preview
from rewardseal.core.private_dir import make_private_dir
from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.receipt_pb2 import EnvelopeSignature, SignedEnvelope

__all__ = [
    "CERTIFICATE_PAYLOAD_TYPE",
    "KEY_ID_PREFIX",
    "PUBLIC_KEY_SIZE",
    "RECEIPT_PAYLOAD_TYPE",
    "REVOCATION_LIST_PAYLOAD_TYPE",
    "SEED_SIZE",
    "SIGNATURE_SIZE",
    "SigningKey",
    "TrustSet",
    "VerifiedPayload",
    "certificate_signing_bytes",
    "key_id_for",
    "pae",
    "sign_certificate",
    "sign_envelope",
    "verify_certificate",
    "verify_detached",
]

RECEIPT_PAYLOAD_TYPE: Final = "application/vnd.rewardseal.receipt.v1+protobuf"
CERTIFICATE_PAYLOAD_TYPE: Final = "application/vnd.rewardseal.certificate.v1+json"
REVOCATION_LIST_PAYLOAD_TYPE: Final = "application/vnd.rewardseal.revocation-list.v1+protobuf"

KEY_ID_PREFIX: Final = "ed25519:sha256:"
SEED_SIZE: Final = 32
PUBLIC_KEY_SIZE: Final = 32
SIGNATURE_SIZE: Final = 64

# Any group/other permission bit on a key file means someone else may have read the seed.
_FORBIDDEN_KEY_FILE_BITS: Final = stat.S_IRWXG | stat.S_IRWXO


def key_id_for(public_key: bytes) -> str:
    """Return the key id of a raw Ed25519 public key (R-SIG-1).

    The id is ``"ed25519:sha256:"`` followed by the lowercase hex SHA-256 of the 32 raw key bytes.

    Raises:
        SignatureError: if ``public_key`` is not exactly 32 bytes.
    """
    if not isinstance(public_key, bytes | bytearray | memoryview):
        raise SignatureError(f"an Ed25519 public key is bytes, not {type(public_key).__name__}")
    raw = bytes(public_key)
    if len(raw) != PUBLIC_KEY_SIZE:
        raise SignatureError(
            f"an Ed25519 public key is {PUBLIC_KEY_SIZE} bytes, this one is {len(raw)}"
        )
    return KEY_ID_PREFIX + hashlib.sha256(raw).hexdigest()


def pae(payload_type: str, payload: bytes) -> bytes:
    """Return the DSSE v1 pre-authentication encoding of ``payload_type`` and ``payload``.

    ``"DSSEv1" SP LEN(type) SP type SP LEN(payload) SP payload`` with lengths in ASCII decimal
    bytes. Binding the type into the signed bytes stops a signature over one schema from being
    replayed as another.
    """
    type_bytes = payload_type.encode("utf-8")
    body = bytes(payload)
    # One bytes formatting (C): every reader of a receipt builds these bytes once.
    return b"DSSEv1 %d %b %d %b" % (len(type_bytes), type_bytes, len(body), body)


class SigningKey:
    """An Ed25519 private key. Its seed never appears in ``repr``, ``str`` or any message."""

    __slots__ = ("_key", "_key_id", "_secret")

    def __init__(self, key: nacl.signing.SigningKey) -> None:
        """Wrap a PyNaCl signing key; prefer :meth:`generate`, :meth:`from_seed` or
        :meth:`load_or_create`."""
        self._key = key
        self._key_id = key_id_for(bytes(key.verify_key))
        # libsodium's 64-byte secret key (seed and public key), for :meth:`sign`.
        self._secret = nacl.bindings.crypto_sign_seed_keypair(key.encode())[1]

    @classmethod
    def generate(cls) -> SigningKey:
        """Return a fresh random key."""
        return cls(nacl.signing.SigningKey.generate())

    @classmethod
    def from_seed(cls, seed: bytes) -> SigningKey:
        """Return the key for a 32-byte seed.

        Raises:
            SignatureError: if the seed is not exactly 32 bytes.
        """
        raw = bytes(seed)
        if len(raw) != SEED_SIZE:
            # Say only the length: the bytes themselves are secret.
            raise SignatureError(f"an Ed25519 seed is {SEED_SIZE} bytes, this one is {len(raw)}")
        return cls(nacl.signing.SigningKey(raw))

    @classmethod
    def load_or_create(cls, path: Path) -> SigningKey:
        """Load the key stored at ``path``, creating it on first start (R-SIG-1).

        A new key is written as its hex seed to a file that is created with mode 0600 and only
        appears at ``path`` once fully written, so a concurrent starter never reads half a key.
        An existing file may hold the seed as 32 raw bytes or 64 hex digits.

        Raises:
            SignatureError: if the existing file can be read by group or others, is not a
                regular file, or does not hold a seed.
        """
        path = Path(path)
        try:
            return cls._load(path)
        except FileNotFoundError:
            pass
        key = cls.generate()
        try:
            _create_key_file(path, key._key.encode().hex().encode("ascii") + b"\n")
        except FileExistsError:
            # Another process created it between our load and create: use theirs.
            return cls._load(path)
        return key

    @classmethod
    def _load(cls, path: Path) -> SigningKey:
        # Open first and stat the descriptor, so the mode we check is the file we read.
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_CLOEXEC", 0))
        try:
            info = os.fstat(fd)
            if not stat.S_ISREG(info.st_mode):
                raise SignatureError(f"signing key {path} is not a regular file")
            if info.st_mode & _FORBIDDEN_KEY_FILE_BITS:
                raise SignatureError(
                    f"refusing to load signing key {path}: its mode is "
                    f"{stat.S_IMODE(info.st_mode):04o}, so group or others may read it; "
                    "run chmod 600 on it (or replace the key, if it may have leaked)"
                )
            with os.fdopen(fd, "rb", closefd=False) as handle:
                content = handle.read(4 * SEED_SIZE + 1)
        finally:
            os.close(fd)
        return cls.from_seed(_parse_seed(content, path))

    @property
    def public_key(self) -> bytes:
        """The raw 32-byte Ed25519 public key."""
        return bytes(self._key.verify_key)

    @property
    def key_id(self) -> str:
        """The key id of :attr:`public_key` (see :func:`key_id_for`)."""
        return self._key_id

    def sign(self, data: bytes) -> bytes:
        """Return the 64-byte detached Ed25519 signature of ``data``."""
        # libsodium directly: PyNaCl's SigningKey.sign wraps the same call in objects that
        # cost a sixth of the signature (the worker signs every receipt).
        return nacl.bindings.crypto_sign(bytes(data), self._secret)[:SIGNATURE_SIZE]

    def __repr__(self) -> str:
        return f"SigningKey(key_id={self._key_id!r})"


def _parse_seed(content: bytes, path: Path) -> bytes:
    """Return the seed in a key file's content: 32 raw bytes, or 64 hex digits and whitespace."""
    if len(content) == SEED_SIZE:
        return content
    text = content.strip()
    if len(text) == 2 * SEED_SIZE:
        with contextlib.suppress(ValueError):
            return bytes.fromhex(text.decode("ascii"))
    # Never echo the content: it may be a key in some other format.
    raise SignatureError(
        f"signing key {path} does not hold an Ed25519 seed "
        f"({SEED_SIZE} raw bytes or {2 * SEED_SIZE} hex digits)"
    )


def _create_key_file(path: Path, content: bytes) -> None:
    """Write ``content`` to a new 0600 file at ``path``; raise FileExistsError if one exists."""
    # Every directory made on the way is 0700, not only the last (mkdir(parents=True) would
    # make the others with the umask's default mode).
    make_private_dir(path.parent)
    tmp = path.with_name(f".{path.name}.{secrets.token_hex(8)}.tmp")
    # O_EXCL: never write through a file or symlink someone planted; 0600 from the first byte.
    fd = os.open(tmp, os.O_WRONLY | os.O_CREAT | os.O_EXCL | getattr(os, "O_CLOEXEC", 0), 0o600)
    try:
        try:
            view = memoryview(content)
            while view:
                view = view[os.write(fd, view) :]
            os.fsync(fd)
        finally:
            os.close(fd)
        # link() publishes the finished file atomically and, unlike rename(), never replaces an
        # existing key.
        os.link(tmp, path)
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def sign_envelope(
    payload_type: str,
    payload: bytes,
    key: SigningKey,
    *,
    unscored: bool = False,
) -> SignedEnvelope:
    """Sign ``payload`` as ``payload_type`` and wrap both in a :class:`SignedEnvelope` (R-MSG-8).

    The envelope always states ``execute_seal``, ``production_seal`` and
    ``flow_governed_policy`` as false: a reward receipt is never an execution seal.
    """
    body = bytes(payload)
    return SignedEnvelope(
        payload_type=payload_type,
        payload=body,
        signatures=[EnvelopeSignature(keyid=key.key_id, sig=key.sign(pae(payload_type, body)))],
        execute_seal=False,
        production_seal=False,
        flow_governed_policy=False,
        unscored=unscored,
    )


def verify_detached(public_key: bytes, data: bytes, sig: bytes) -> bool:
    """Return whether ``sig`` is a valid Ed25519 signature of ``data`` by ``public_key``.

    A signature of the wrong length is simply invalid.

    Raises:
        SignatureError: if ``public_key`` is not 32 bytes (a configuration error, not a forgery).
    """
    key_id_for(public_key)  # validates the length
    return _verify_raw(bytes(public_key), data, sig)


def _verify_raw(public_key: bytes, data: bytes, sig: bytes) -> bool:
    """Whether ``sig`` is ``public_key``'s Ed25519 signature of ``data``; the key is 32 bytes
    (checked by the caller, once per key)."""
    raw_sig = bytes(sig)
    # Check the length ourselves so that a short signature is "invalid", never a library error.
    if len(raw_sig) != SIGNATURE_SIZE:
        return False
    try:
        # libsodium directly, as VerifyKey.verify calls it (signature + message, raw key),
        # without its per-call checks and encoder: every receipt a reader opens pays this.
        nacl.bindings.crypto_sign_open(raw_sig + bytes(data), public_key)
    except nacl.exceptions.BadSignatureError:
        return False
    return True


@dataclass(frozen=True, slots=True)
class VerifiedPayload:
    """The payload of an envelope whose signatures met the threshold.

    ``payload`` is exactly the bytes that were signed; parse these, never a re-serialization.
    ``key_ids`` names each distinct trusted key that verified, in envelope order.
    """

    payload_type: str
    payload: bytes
    key_ids: tuple[str, ...]


class TrustSet:
    """An immutable set of trusted Ed25519 public keys, addressed by key id (R-SIG-2)."""

    __slots__ = ("_keys",)

    _keys: Mapping[str, bytes]
    """Key id -> the raw 32-byte public key (an immutable copy, checked once here)."""

    def __init__(self, public_keys: Iterable[bytes]) -> None:
        """Trust each raw 32-byte public key in ``public_keys`` (repeats collapse).

        Raises:
            SignatureError: if any key is not 32 bytes.
        """
        keys: dict[str, bytes] = {}
        for public_key in public_keys:
            key_id = key_id_for(public_key)  # validates before libsodium sees it
            keys[key_id] = bytes(public_key)
        object.__setattr__(self, "_keys", MappingProxyType(keys))

    def __setattr__(self, name: str, value: object) -> None:
        raise AttributeError("a TrustSet is immutable")

    def __delattr__(self, name: str) -> None:
        raise AttributeError("a TrustSet is immutable")

    @property
    def key_ids(self) -> frozenset[str]:
        """The ids of the trusted keys."""
        return frozenset(self._keys)

    def public_key(self, key_id: str) -> bytes:
        """Return the raw public key trusted under ``key_id``.

        Raises:
            KeyError: if ``key_id`` is not trusted.
        """
        return bytes(self._keys[key_id])

    def __contains__(self, key_id: object) -> bool:
        return key_id in self._keys

    def __iter__(self) -> Iterator[str]:
        return iter(sorted(self._keys))

    def __len__(self) -> int:
        return len(self._keys)

    def __repr__(self) -> str:
        return f"TrustSet(key_ids={sorted(self._keys)!r})"

    def verify_signature(self, key_id: str, data: bytes, sig: bytes) -> bool:
        """Return whether ``sig`` over ``data`` verifies under the trusted key ``key_id``.

        An unknown ``key_id`` or a signature of the wrong length gives False.
        """
        public_key = self._keys.get(key_id)
        return public_key is not None and _verify_raw(public_key, data, sig)

    def verify(
        self,
        envelope: SignedEnvelope,
        *,
        payload_type: str,
        threshold: int = 1,
    ) -> VerifiedPayload:
        """Verify ``envelope`` over its exact payload bytes and return them (R-MSG-8, R-SIG-2).

        Call this *before* parsing the payload. The envelope's ``unscored`` and ``*_seal`` flags
        lie outside the signature: trust what the verified payload says, not those flags.

        Raises:
            ValueError: if ``threshold`` is below 1 (that would accept unsigned envelopes).
            SignatureError: if the payload type is not ``payload_type`` or fewer than
                ``threshold`` distinct trusted keys verify.
        """
        if threshold < 1:
            raise ValueError(f"threshold must be at least 1, not {threshold}")

        # Verification steps:
        #  1. The envelope's payload type must be the one the caller expects. (PAE binds the type
        #     as well, so a signature over another type cannot verify below either.)
        #  2. A signature whose keyid is not in this trust set is ignored, never counted.
        #  3. A keyid that has already verified is ignored: a copied signature never counts twice.
        #  4. A signature that is not exactly 64 bytes is invalid and ignored.
        #  5. The signature must verify over pae(envelope.payload_type, envelope.payload), the
        #     exact received bytes, never a re-serialization; an invalid one is ignored.
        #  6. At least `threshold` distinct trusted keys must have verified.
        claimed_type = envelope.payload_type
        if claimed_type != payload_type:  # step 1
            raise SignatureError(
                f"payload type {preview(claimed_type)} is not {payload_type!r}",
                metadata={
                    "payload_type": preview(claimed_type, quoted=False),
                    "expected_payload_type": payload_type,
                },
            )

        payload = bytes(envelope.payload)
        # Build the signed bytes once, from what we received (step 5).
        signed = pae(claimed_type, payload)
        verified: list[str] = []
        for signature in envelope.signatures:
            public_key = self._keys.get(signature.keyid)
            if public_key is None:  # step 2
                continue
            if signature.keyid in verified:  # step 3
                continue
            # steps 4 and 5
            if _verify_raw(public_key, signed, signature.sig):
                verified.append(signature.keyid)

        if len(verified) < threshold:  # step 6
            raise SignatureError(
                f"{len(verified)} of {len(envelope.signatures)} signature(s) verified by a "
                f"trusted key; {threshold} required",
                metadata={"verified": str(len(verified)), "threshold": str(threshold)},
            )
        return VerifiedPayload(payload_type=claimed_type, payload=payload, key_ids=tuple(verified))


def certificate_signing_bytes(cert: RewardCertificate) -> bytes:
    """Return the canonical bytes a certificate's signature covers (R-MSG-4, R-DIG-1).

    These are the RFC 8785 canonical JSON of the proto3 JSON mapping (original field names) of
    the certificate without its ``signature`` field; ``issuer_key_id`` is included, so the
    signature also binds who issued it.
    """
    unsigned = RewardCertificate()
    unsigned.CopyFrom(cert)
    unsigned.ClearField("signature")
    body = json_format.MessageToDict(unsigned, preserving_proto_field_name=True)
    return rfc8785.dumps(body)


def sign_certificate(cert: RewardCertificate, key: SigningKey) -> RewardCertificate:
    """Return a signed copy of ``cert`` with ``issuer_key_id`` set to ``key``'s id.

    ``cert`` itself is left unchanged. Any existing signature is replaced.
    """
    signed = RewardCertificate()
    signed.CopyFrom(cert)
    signed.ClearField("signature")
    # Set the issuer before computing the bytes: the signature must cover it.
    signed.issuer_key_id = key.key_id
    signed.signature = key.sign(pae(CERTIFICATE_PAYLOAD_TYPE, certificate_signing_bytes(signed)))
    return signed


def verify_certificate(cert: RewardCertificate, trust: TrustSet) -> str:
    """Verify a certificate's inline signature and return the id of the key that made it.

    Raises:
        SignatureError: if ``issuer_key_id`` is not in ``trust``, the signature is not 64 bytes,
            or it does not verify over :func:`certificate_signing_bytes`.
    """
    key_id = cert.issuer_key_id
    # Both come from the certificate as received: quoted only as a short preview.
    cert_id, key_shown = preview(cert.certificate_id), preview(key_id)
    if key_id not in trust:
        raise SignatureError(
            f"certificate {cert_id} names issuer key {key_shown}, which is not trusted",
            metadata={"issuer_key_id": preview(key_id, quoted=False)},
        )
    if len(cert.signature) != SIGNATURE_SIZE:
        raise SignatureError(
            f"certificate {cert_id} has a {len(cert.signature)}-byte signature; "
            f"Ed25519 signatures are {SIGNATURE_SIZE} bytes",
            metadata={"issuer_key_id": key_id},
        )
    signed = pae(CERTIFICATE_PAYLOAD_TYPE, certificate_signing_bytes(cert))
    if not trust.verify_signature(key_id, signed, cert.signature):
        raise SignatureError(
            f"certificate {cert_id} signature does not verify under {key_shown}",
            metadata={"issuer_key_id": key_id},
        )
    return key_id
