"""What every ``rewardseal-control`` command shares: names, exit statuses, the two errors."""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping

from rewardseal.core.errors import RewardSealError
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer, IssuerKeyRole
from rewardseal_control.settings import ENV_PREFIX

PROG = "rewardseal-control"
TARGET_ENV = f"{ENV_PREFIX}TARGET"
CLIENT_TLS_ENV = f"{ENV_PREFIX}CLIENT_TLS_"
"""Prefix of the admin commands' TLS variables (``CA``, ``CERT``, ``KEY``, ``SERVER_NAME``):
not ``TLS_CERT``, which is the server's own certificate when ``serve`` runs in the same shell."""
PAGE_SIZE = 500
"""Items asked for per listing page (control's most)."""
EXIT_REFUSED = 1
"""The control plane refused the request, or could not be reached."""
EXIT_USAGE = 2
"""A usage or local error: a missing or malformed file, no token, bad settings."""

SCOPES: Mapping[str, int] = {
    "synthetic": CalibrationScope.CALIBRATION_SCOPE_SYNTHETIC,
    "production": CalibrationScope.CALIBRATION_SCOPE_PRODUCTION,
}
ISSUERS: Mapping[str, int] = {
    "organization": CertificateIssuer.CERTIFICATE_ISSUER_ORGANIZATION,
    "self_signed": CertificateIssuer.CERTIFICATE_ISSUER_SELF_SIGNED,
}
ROLES: Mapping[str, int] = {
    "worker": IssuerKeyRole.ISSUER_KEY_ROLE_WORKER,
    "organization": IssuerKeyRole.ISSUER_KEY_ROLE_ORGANIZATION,
}


class UsageError(Exception):
    """A local problem with the command line or its files (exit status 2)."""


class Refused(Exception):
    """The control plane answered with an error (exit status 1)."""

    def __init__(self, error: RewardSealError) -> None:
        super().__init__(error.message)
        self.error = error


@contextlib.contextmanager
def remote() -> Iterator[None]:
    """Calls to the control plane: its refusal (or absence) is exit status 1, not a local
    error (exit status 2) such as a file that is not a calibration summary."""
    try:
        yield
    except RewardSealError as error:
        raise Refused(error) from None
