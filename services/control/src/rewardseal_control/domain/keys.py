"""Issuer keys: registration with proof of possession, admission and bindings, enrollments and
retirement (R-C-2, R-C-7, R-C-10, R-C-11).

The interceptor lets the worker role call RegisterIssuerKey; only here is the key's role
visible, so here a credential other than the admin's is held to WORKER keys it proves it holds.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import Sequence
from datetime import timedelta
from typing import Any

from rewardseal.core.errors import PermissionDenied, ValidationError
from rewardseal.core.key_possession import verify_registration
from rewardseal.v1.certificate_pb2 import IssuerKey
from rewardseal.v1.control_service_pb2 import RegisterIssuerKeyRequest
from rewardseal.v1.enums_pb2 import IssuerKeyRole
from rewardseal_control.domain.parts import DomainPart
from rewardseal_control.roles import ADMIN_ROLE
from rewardseal_control.store.audit_log import (
    ACTION_ACCEPT_CERTIFICATE,
    ACTION_REGISTER_KEY,
    ACTION_RETIRE_KEY,
)
from rewardseal_control.store.bundle_certificates import Acceptance
from rewardseal_control.store.enrollments import (
    ACTION_CREATE_ENROLLMENT,
    DEFAULT_ENROLLMENT_TTL,
    MAX_ENROLLMENT_TTL,
    Enrollment,
)
from rewardseal_control.store.key_admission import Admission
from rewardseal_control.store.key_bindings import ACTION_APPROVE_KEY, ACTION_UNBIND_KEY

__all__ = ["KeyAdmissions", "enum_name"]

# One logger for the domain layer: an operator follows one name.
_log = logging.getLogger("rewardseal_control.domain")


def enum_name(enum: Any, value: int) -> str:
    """``value``'s name in the protobuf ``enum`` (the number when it has none)."""
    try:
        return str(enum.Name(value))
    except ValueError:
        return str(value)


class KeyAdmissions(DomainPart):
    """Registers, admits, binds, unbinds and retires issuer keys; makes enrollment credentials.

    ``key`` is this control plane's organization key (its retirement is warned about);
    ``audited`` is told the audit-log action of each admin action done.
    """

    async def register(
        self, request: RegisterIssuerKeyRequest, actor: str
    ) -> tuple[IssuerKey, Admission]:
        """Register ``request.key`` for ``actor`` (a role name); the stored key and its
        admission. A credential other than the admin's registers WORKER keys only, and only
        with proof that it holds the key (R-C-10); the admin may register a public key it was
        handed. Contracts are bound at once for the admin, for anyone else only through an
        enrollment credential (R-C-11).

        Raises:
            ValidationError: no key, or a malformed one.
            PermissionDenied: a non-admin registering another role, or no valid proof.
        """
        if not request.HasField("key"):
            raise ValidationError("key is required")
        admin = actor == ADMIN_ROLE
        # A worker credential that could add an ORGANIZATION key could make control trust any
        # signer, so anything but the admin (fail closed, also for an unknown caller) adds
        # WORKER keys only.
        if not admin and request.key.role != IssuerKeyRole.ISSUER_KEY_ROLE_WORKER:
            raise PermissionDenied(
                f"the {actor} credential registers WORKER keys only, not "
                f"{enum_name(IssuerKeyRole, request.key.role)}"
            )
        now = self._clock()
        # Proof of possession (R-C-10): a shared worker credential registers only a key its
        # caller holds. The admin may register a public key it was handed.
        if not admin or request.HasField("possession"):
            verify_registration(request, now)
        contracts = list(request.reward_contract_digests)
        # Contracts are bound at once from the admin; from anyone else only through an
        # enrollment credential (which then checks them against what it names).
        bind = contracts if admin or request.enrollment_credential else []
        key, created = await asyncio.to_thread(
            self._store.keys.register_issuer_key,
            request.key,
            actor,
            request.reason,
            at=now,
            bind=bind,
            enrollment_credential=request.enrollment_credential,
            bundle_certificate=(
                request.bundle_certificate if request.HasField("bundle_certificate") else None
            ),
        )
        self._audited(ACTION_REGISTER_KEY)
        if created:
            # One line per new key (a repeat is a no-op and says nothing): who, what, which.
            _log.info(
                "registered %s key %s (by the %s credential)",
                enum_name(IssuerKeyRole, key.role).removeprefix("ISSUER_KEY_ROLE_"),
                key.key_id,
                actor,
            )
        admission = await self.admission(key.key_id)
        if key.role == IssuerKeyRole.ISSUER_KEY_ROLE_WORKER:
            waiting = sorted(set(contracts) - set(admission.contract_digests))
            if waiting and created:
                _log.info(
                    "worker key %s waits for an admin to admit it: rewardseal-control keys "
                    "approve %s %s",
                    key.key_id,
                    key.key_id,
                    " ".join(f"--contract {digest}" for digest in waiting),
                )
        return key, admission

    async def admission(self, key_id: str) -> Admission:
        """Whether ``key_id`` is admitted and the contracts it is bound to.

        Raises:
            NotFound: no such key.
        """
        return await asyncio.to_thread(self._store.bindings.admission, key_id)

    async def approve(
        self,
        key_id: str,
        contract_digests: Sequence[str],
        actor: str,
        reason: str,
        *,
        accept_bundle_certificate: bool = False,
    ) -> tuple[IssuerKey, Admission, Acceptance]:
        """Admit a WORKER key and bind it to ``contract_digests``, accepting its bundle
        certificates when asked (R-C-10, R-C-11); the key, its admission and what was accepted.

        Raises:
            ValidationError, NotFound, CertificationRefused: as
                :meth:`~rewardseal_control.store.key_bindings.KeyBindingStore.approve`.
        """
        _, acceptance = await asyncio.to_thread(
            self._store.bindings.approve,
            key_id,
            list(contract_digests),
            actor,
            reason,
            accept_bundle_certificate=accept_bundle_certificate,
            at=self._clock(),
        )
        self._audited(ACTION_APPROVE_KEY)
        if acceptance.accepted:
            self._audited(ACTION_ACCEPT_CERTIFICATE)
        key = await asyncio.to_thread(self._store.keys.get_issuer_key, key_id)
        admission = await self.admission(key.key_id)
        _log.info(
            "admitted worker key %s for %s%s",
            key.key_id,
            ", ".join(admission.contract_digests),
            f"; accepted its bundle certificate {', '.join(acceptance.accepted)} (listed, "
            "revocable like any certificate)"
            if acceptance.accepted
            else "",
        )
        return key, admission, acceptance

    async def unbind(
        self, key_id: str, contract_digests: Sequence[str], actor: str, reason: str
    ) -> tuple[IssuerKey, Admission]:
        """Take ``contract_digests`` out of the key's bindings; the key and its admission.

        Raises:
            ValidationError, NotFound: as
                :meth:`~rewardseal_control.store.key_bindings.KeyBindingStore.unbind`.
        """
        await asyncio.to_thread(
            self._store.bindings.unbind,
            key_id,
            list(contract_digests),
            actor,
            reason,
            at=self._clock(),
        )
        self._audited(ACTION_UNBIND_KEY)
        key = await asyncio.to_thread(self._store.keys.get_issuer_key, key_id)
        _log.info(
            "unbound worker key %s from %s",
            key.key_id,
            ", ".join(sorted(set(contract_digests))),
        )
        return key, await self.admission(key.key_id)

    async def create_enrollment(
        self,
        contract_digests: Sequence[str],
        actor: str,
        reason: str,
        *,
        ttl_seconds: int = 0,
        any_contract: bool = False,
        accept_bundle_certificate: bool = False,
    ) -> Enrollment:
        """A new one-time enrollment credential (R-C-11), living ``ttl_seconds`` (0: one day).

        Raises:
            ValidationError: a negative or too long lifetime, or as
                :meth:`~rewardseal_control.store.key_bindings.KeyBindingStore.create_enrollment`.
        """
        if ttl_seconds < 0:
            raise ValidationError("ttl_seconds must not be negative (0: one day)")
        ttl = timedelta(seconds=ttl_seconds) if ttl_seconds else DEFAULT_ENROLLMENT_TTL
        if ttl > MAX_ENROLLMENT_TTL:
            raise ValidationError("ttl_seconds must be at most 365 days")
        enrollment = await asyncio.to_thread(
            self._store.bindings.create_enrollment,
            list(contract_digests),
            actor,
            reason,
            ttl=ttl,
            any_contract=any_contract,
            accept_bundle_certificate=accept_bundle_certificate,
            at=self._clock(),
        )
        self._audited(ACTION_CREATE_ENROLLMENT)
        # Never the credential itself: it is answered once and kept nowhere but as a hash.
        _log.info(
            "created enrollment %s for %s (expires %s%s)",
            enrollment.enrollment_id,
            ", ".join(enrollment.contract_digests) or "the contracts the worker names",
            enrollment.expires_at.isoformat(),
            "; accepts the key's bundle certificate"
            if enrollment.accepts_bundle_certificate
            else "",
        )
        return enrollment

    async def retire(self, key_id: str, actor: str, reason: str) -> IssuerKey:
        """Retire ``key_id`` (it signs nothing more that control accepts); the retired key.

        Raises:
            ValidationError, NotFound: as
                :meth:`~rewardseal_control.store.keys.IssuerKeyStore.retire_issuer_key`.
        """
        key = await asyncio.to_thread(
            self._store.keys.retire_issuer_key, key_id, actor, reason, at=self._clock()
        )
        self._audited(ACTION_RETIRE_KEY)
        _log.info("retired issuer key %s", key.key_id)
        if key.key_id == self._key.key_id:
            _log.warning(
                "the control plane's own organization key %s is retired: it can no longer issue "
                "certificates; revocation lists stay signed by it until the key file is replaced",
                key.key_id,
            )
        return key
