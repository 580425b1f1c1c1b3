"""Issuing certificates: every issuing rule (R-C-3, R-MSG-5, R-CAL-4, R-C-13), then the
organization key's signature and the store's record (audited)."""

from __future__ import annotations

import asyncio
import logging
import math
import secrets
from dataclasses import dataclass
from datetime import datetime

from rewardseal.core.calibration import delta_from_summary
from rewardseal.core.errors import CertificationRefused, NotFound, ValidationError
from rewardseal.core.issuing import check_summary_for, issue_certificate
from rewardseal.core.validation import (
    check_policy_update_field,
    validate_calibration_summary,
    validate_digest,
    validate_id,
    validate_key_id,
)
from rewardseal.v1.certificate_pb2 import CalibrationSummary, IssuerKey, RewardCertificate
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer, IssuerKeyRole
from rewardseal_control.domain.keys import enum_name
from rewardseal_control.domain.parts import DomainPart
from rewardseal_control.store import StoredCertificate
from rewardseal_control.store.audit_log import ACTION_ISSUE_CERTIFICATE

__all__ = ["DELTA_TOLERANCE", "CertificateIssuing", "CertificateOrder"]

# One logger for the domain layer: an operator follows one name.
_log = logging.getLogger("rewardseal_control.domain")

DELTA_TOLERANCE = 1e-12
"""How far a stated delta may sit from ``1 - confidence`` (float noise, not a second opinion)."""


@dataclass(frozen=True)
class CertificateOrder:
    """What an admin asks to certify: a contract, the calibration that backs it, and how.

    Empty values mean the defaults: a random ``certificate_id``, this control plane's own
    ``issuer_key_id``, and no stated ``delta`` (0.0; a stated one must be the summary's).
    """

    contract_digest: str
    calibration: CalibrationSummary | None
    scope: CalibrationScope.ValueType
    issuer: CertificateIssuer.ValueType
    issued_at_policy_update: int = 0
    expiry_policy_updates: int = 0
    certificate_id: str = ""
    issuer_key_id: str = ""
    delta: float = 0.0


class CertificateIssuing(DomainPart):
    """Issues certificates signed by ``key`` (this control plane's organization key), which
    must be registered as an active ORGANIZATION key; ``audited`` is told each issue."""

    async def issue(self, order: CertificateOrder, actor: str, reason: str) -> StoredCertificate:
        """Apply every issuing rule to ``order``, sign, and record the certificate for
        ``actor`` (audited); the stored certificate (the one stored already for a repeat).

        Raises:
            ValidationError: a malformed order, or a stated delta that is not the summary's.
            NotFound: an unregistered contract.
            CertificationRefused: a summary the contract's policy refuses, a key that may not
                sign, or a contract or checker configuration whose certificates are revoked.
        """
        now = self._clock()
        certificate = await self._build(order, now)
        revoked = await asyncio.to_thread(
            self._store.revocations.revoked_scope,
            certificate.reward_contract_digest,
            certificate.checker_configuration_digest,
        )
        if revoked is not None:
            kind, digest = revoked
            # It would be revoked at birth: say so rather than issue it (R-C-13).
            raise CertificationRefused(
                f"every certificate of {kind} {digest} is revoked; certify a new contract "
                "digest or a new checker configuration",
                metadata={"rule": "R-C-13", "revoked": kind, "digest": digest},
            )
        stored, created = await asyncio.to_thread(
            self._store.certificates.record_certificate, certificate, actor, reason, at=now
        )
        self._audited(ACTION_ISSUE_CERTIFICATE)
        if created:
            _log.info(
                "issued certificate %s for contract %s (epsilon %.6g, from policy update %d "
                "for %d updates)",
                stored.certificate.certificate_id,
                stored.certificate.reward_contract_digest,
                stored.certificate.epsilon,
                stored.certificate.issued_at_policy_update,
                stored.certificate.expiry_policy_updates,
            )
        return stored

    async def _build(self, order: CertificateOrder, now: datetime) -> RewardCertificate:
        """Apply every issuing rule (R-C-3, R-MSG-5, R-CAL-4) and sign; refuse on the first
        broken one."""
        digest = validate_digest(order.contract_digest, "reward_contract_digest")
        if order.calibration is None:
            raise ValidationError("calibration (the calibration summary) is required")
        summary = order.calibration
        validate_calibration_summary(summary)
        scope = order.scope
        issuer = order.issuer
        if scope not in (
            CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
            CalibrationScope.CALIBRATION_SCOPE_PRODUCTION,
        ):
            raise ValidationError("calibration_scope must be SYNTHETIC or PRODUCTION")
        if issuer not in (
            CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED,
            CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
        ):
            raise ValidationError("issuer must be SELF_SIGNED or ORGANIZATION")
        check_policy_update_field(order.issued_at_policy_update, "issued_at_policy_update")
        certificate_id = order.certificate_id or f"cert.{secrets.token_hex(8)}"
        validate_id(certificate_id, "certificate_id")
        key_id = order.issuer_key_id or self._key.key_id
        validate_key_id(key_id)

        registered = await asyncio.to_thread(self._store.contracts.get_contract, digest)
        contract = registered.contract
        # R-C-3 and R-MSG-5 before the key: who signs, for what scope, on what data.
        check_summary_for(
            summary,
            contract.certificate_policy,
            contract_digest=digest,
            scope=scope,
            issuer=issuer,
        )
        production = scope == CalibrationScope.CALIBRATION_SCOPE_PRODUCTION
        await self._check_signing_key(key_id, now, production=production)

        # A stated delta must be the summary's own (R-CAL-4); the certificate's is recomputed.
        delta = delta_from_summary(summary)
        if order.delta and not (
            math.isfinite(order.delta) and abs(order.delta - delta) <= DELTA_TOLERANCE
        ):
            raise ValidationError(
                f"delta {order.delta!r} does not match the summary's confidence "
                f"{summary.confidence!r} (delta is 1 - confidence = {delta!r})"
            )
        return issue_certificate(
            summary,
            contract,
            self._key,
            contract_digest=digest,
            certificate_id=certificate_id,
            issued_at=now,
            scope=scope,
            issuer=issuer,
            issued_at_policy_update=order.issued_at_policy_update,
            expiry_policy_updates=order.expiry_policy_updates,
        )

    async def _check_signing_key(self, key_id: str, now: datetime, *, production: bool) -> None:
        """The named key must be this control plane's own key, registered as an active
        ORGANIZATION key: a retired or unregistered key issues nothing."""
        organization = IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION
        active = await asyncio.to_thread(self._store.keys.active_key, key_id, organization, now)
        if active is None:
            state = await self._key_state(key_id)
            needs = (
                "PRODUCTION scope needs an ORGANIZATION issuer whose key is registered in the "
                "control plane's issuer key registry; "
                if production
                else ""
            )
            raise CertificationRefused(
                f"{needs}issuer key {key_id} {state}",
                metadata={"rule": "R-MSG-5", "issuer_key_id": key_id},
            )
        if key_id != self._key.key_id:
            raise CertificationRefused(
                f"issuer key {key_id} is registered, but this control plane signs only with its "
                f"own organization key {self._key.key_id}",
                metadata={"issuer_key_id": key_id},
            )

    async def _key_state(self, key_id: str) -> str:
        """Why ``key_id`` is not an active organization key, as the end of a sentence."""
        try:
            key: IssuerKey = await asyncio.to_thread(self._store.keys.get_issuer_key, key_id)
        except NotFound:
            return "is not registered"
        if key.retired:
            return "is retired and cannot issue"
        if key.role != IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION:
            return f"is registered as {enum_name(IssuerKeyRole, key.role)}, not ORGANIZATION"
        return "is outside its validity window"
