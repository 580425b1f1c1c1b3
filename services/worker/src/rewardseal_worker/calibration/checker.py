"""The checker configuration: what decides a verdict, and the digest a certificate carries."""

from __future__ import annotations

from typing import Any, Final

from rewardseal.core.digest import digest_json
from rewardseal_worker import __version__
from rewardseal_worker.bundle import ContractBundle

__all__ = ["JUDGE_VERSION", "checker_configuration", "checker_configuration_digest"]

# The judge now lives in rewardseal.core.judging; the name keeps its old module path because it
# enters the checker configuration digest, which certificates carry.
JUDGE_VERSION: Final = f"rewardseal_worker.judge/{__version__}"
"""Names the judge implementation in the checker configuration digest."""


def checker_configuration(bundle: ContractBundle) -> dict[str, Any]:
    """The document the checker configuration digest covers: what decides a verdict."""
    contract = bundle.contract
    # How trials draw task parameter values (R-CAL-6) is the corpus's, not the checker's: the
    # corpus digest on the summary and the certificate names it.
    return {
        "judge_version": JUDGE_VERSION,
        "recipe_kind": str(bundle.recipe.get("kind")),
        "required_effects_digest": contract.required_effects_digest,
        "forbidden_effects_digest": contract.forbidden_effects_digest,
        "threshold": contract.certificate_policy.threshold,
    }


def checker_configuration_digest(bundle: ContractBundle) -> str:
    """``digest_json`` of :func:`checker_configuration`."""
    return digest_json(checker_configuration(bundle))
