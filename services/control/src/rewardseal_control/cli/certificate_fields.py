"""A certificate as a FIELD / VALUE table: what ``certificates issue`` prints of the certificate
it issued and ``certificates show`` of any one (with its state)."""

from __future__ import annotations

from rewardseal.v1.certificate_pb2 import RewardCertificate
from rewardseal.v1.enums_pb2 import CalibrationScope, CertificateIssuer
from rewardseal_control.cli.output import enum_short, time_text


def updates_text(certificate: RewardCertificate) -> str:
    """The policy updates the certificate is current for: ``100 .. 149``."""
    last = certificate.issued_at_policy_update + certificate.expiry_policy_updates - 1
    return f"{certificate.issued_at_policy_update} .. {last}"


def certificate_fields(
    certificate: RewardCertificate,
    digest: str,
    *,
    epsilon_note: str = "",
    state: str | None = None,
) -> list[tuple[str, str]]:
    """The rows of the table: ``state`` second when given; ``epsilon_note`` after epsilon."""
    return [
        ("certificate_id", certificate.certificate_id),
        *([("state", state)] if state is not None else []),
        ("certificate_digest", digest),
        ("reward_contract_digest", certificate.reward_contract_digest),
        ("epsilon", f"{certificate.epsilon:.6g}{epsilon_note}"),
        ("delta", f"{certificate.delta:g}"),
        ("threshold", f"{certificate.threshold:g}"),
        (
            "scope",
            enum_short(CalibrationScope, certificate.calibration_scope, "CALIBRATION_SCOPE_"),
        ),
        ("issuer", enum_short(CertificateIssuer, certificate.issuer, "CERTIFICATE_ISSUER_")),
        ("issuer_key_id", certificate.issuer_key_id),
        ("current for updates", updates_text(certificate)),
        ("issued_at", time_text(certificate, "issued_at")),
    ]
