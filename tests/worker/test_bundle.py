"""Contract bundles: write/load round trips, every consistency refusal, path-free digests."""

from __future__ import annotations

import copy
import json
import os
import shutil
from pathlib import Path

import pytest
from google.protobuf import json_format
from support.builders import TEST_KEY, make_certificate

from rewardseal.core.contract import certificate_digest
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import ValidationError
from rewardseal.core.judging import parse_effects
from rewardseal.core.signing import SigningKey, TrustSet
from rewardseal.v1.enums_pb2 import OracleChannel
from rewardseal_mockmed.contract import (
    FORBIDDEN_EFFECTS,
    PARAMETERIZED_REQUIRED_EFFECTS,
    REQUIRED_EFFECTS,
    TIER0_RECIPE,
    TIER2_RECIPE,
    mockmed_contract,
    mockmed_contract_digest,
    mockmed_parameterized_contract,
)
from rewardseal_worker import bundle as bundle_module
from rewardseal_worker.bundle import BUNDLE_FILES, ContractBundle, load_bundle, write_bundle

TRUST = TrustSet([TEST_KEY.public_key])


def contract_for(
    *,
    tier=2,
    required=REQUIRED_EFFECTS,
    forbidden=FORBIDDEN_EFFECTS,
    recipe=None,
    keys=None,
    channel=None,
):
    """The MockMed contract re-bound to the given documents (digests recomputed)."""
    contract = mockmed_contract(tier=tier)
    recipe = recipe if recipe is not None else (TIER2_RECIPE if tier == 2 else TIER0_RECIPE)
    contract.required_effects_digest = digest_json(required)
    contract.forbidden_effects_digest = digest_json(forbidden)
    contract.oracle.oracle_recipe_digest = digest_json(recipe)
    if keys is not None:
        del contract.oracle.identity_keys[:]
        contract.oracle.identity_keys.extend(keys)
    if channel is not None:
        contract.oracle.channel = channel
    return contract


def docs(tier=2):
    return {
        "contract": mockmed_contract(tier=tier),
        "required_doc": REQUIRED_EFFECTS,
        "forbidden_doc": FORBIDDEN_EFFECTS,
        "recipe_doc": TIER2_RECIPE if tier == 2 else TIER0_RECIPE,
    }


CALIBRATION = {
    "reward_contract_digest": mockmed_contract_digest(),
    "trials": 300,
    "false_accepts": 0,
    "method": "clopper_pearson_one_sided",
}


@pytest.fixture
def bundle_dir(tmp_path: Path) -> Path:
    return tmp_path / "data" / "contracts" / "mockmed"


class TestRoundTrip:
    @pytest.mark.parametrize(
        ("tier", "recipe", "kind"), [(2, TIER2_RECIPE, "sql"), (0, TIER0_RECIPE, "screen_dump")]
    )
    def test_mockmed_bundle(self, bundle_dir, tier, recipe, kind):
        write_bundle(bundle_dir, **docs(tier))
        loaded = load_bundle(bundle_dir)
        assert isinstance(loaded, ContractBundle)
        assert loaded.path == bundle_dir.resolve()
        assert loaded.contract == mockmed_contract(tier=tier)
        assert loaded.contract_digest == mockmed_contract_digest(tier=tier)
        assert loaded.tier == tier
        assert loaded.required == parse_effects(REQUIRED_EFFECTS)
        assert loaded.forbidden == parse_effects(FORBIDDEN_EFFECTS)
        assert loaded.recipe == recipe
        assert loaded.recipe["kind"] == kind
        assert loaded.certificate is None
        assert loaded.certificate_digest is None
        assert loaded.calibration is None
        assert sorted(p.name for p in bundle_dir.iterdir()) == sorted(BUNDLE_FILES[:4])

    def test_with_certificate_and_calibration(self, bundle_dir):
        certificate = make_certificate()
        write_bundle(bundle_dir, **docs(), certificate=certificate, calibration=CALIBRATION)
        loaded = load_bundle(bundle_dir, trust=TRUST)
        assert loaded.certificate == certificate
        assert loaded.certificate_digest == certificate_digest(certificate)
        assert loaded.calibration == CALIBRATION
        assert sorted(p.name for p in bundle_dir.iterdir()) == sorted(BUNDLE_FILES)

    def test_file_format(self, bundle_dir):
        certificate = make_certificate()
        write_bundle(bundle_dir, **docs(), certificate=certificate)
        for name, doc in (
            ("required_effects.json", REQUIRED_EFFECTS),
            ("forbidden_effects.json", FORBIDDEN_EFFECTS),
            ("oracle_recipe.json", TIER2_RECIPE),
        ):
            assert (bundle_dir / name).read_text() == json.dumps(doc, indent=2, sort_keys=True) + (
                "\n"
            )
        for name, message in (
            ("contract.json", mockmed_contract()),
            ("certificate.json", certificate),
        ):
            expected = json_format.MessageToJson(message, preserving_proto_field_name=True)
            assert (bundle_dir / name).read_text() == expected + "\n"
            assert '"contract_id"' in expected or '"certificate_id"' in expected
        assert not [p for p in bundle_dir.iterdir() if p.name.startswith(".")]

    def test_digests_do_not_depend_on_the_path(self, bundle_dir, tmp_path):
        write_bundle(bundle_dir, **docs(), certificate=make_certificate())
        elsewhere = tmp_path / "somewhere" / "else" / "entirely"
        shutil.copytree(bundle_dir, elsewhere)
        first, second = load_bundle(bundle_dir), load_bundle(elsewhere)
        assert first.path != second.path
        assert first.contract_digest == second.contract_digest == mockmed_contract_digest()
        assert first.certificate_digest == second.certificate_digest
        assert digest_json(dict(first.recipe)) == digest_json(dict(second.recipe))
        assert str(tmp_path) not in json.dumps(dict(first.recipe))

    def test_self_signed_certificate_verifies_against_the_workers_key(self, bundle_dir):
        worker_key = SigningKey.from_seed(bytes(range(1, 33)))
        certificate = make_certificate(key=worker_key)
        write_bundle(bundle_dir, **docs(), certificate=certificate)
        loaded = load_bundle(bundle_dir, trust=TrustSet([worker_key.public_key]))
        assert loaded.certificate == certificate

    def test_author_order_does_not_change_the_digest(self, bundle_dir):
        reordered = copy.deepcopy(REQUIRED_EFFECTS)
        reordered["effects"][0] = dict(reversed(list(reordered["effects"][0].items())))
        write_bundle(bundle_dir, **dict(docs(), required_doc=reordered))
        assert load_bundle(bundle_dir).contract_digest == mockmed_contract_digest()


def refusal(**changes):
    return {**docs(), **changes}


NO_REQUIRED = {"effects": []}
TWO_KEY_RECIPE = dict(TIER2_RECIPE, identity_fields={"patient_id": "patient_id", "site_id": "site"})
FORBIDDEN_WITH_COUNT = copy.deepcopy(FORBIDDEN_EFFECTS)
FORBIDDEN_WITH_COUNT["effects"][0]["new_records"] = 1
FOREIGN_KEY_EFFECTS = copy.deepcopy(FORBIDDEN_EFFECTS)
FOREIGN_KEY_EFFECTS["effects"][0]["select"]["site"] = {"identity": "site_id"}
ORDERS_RECIPE = dict(TIER2_RECIPE, table="orders")
CREDENTIAL_RECIPE = dict(TIER2_RECIPE, password="hunter2")
REST_RECIPE = {
    "kind": "rest",
    "base_url_env": "MOCKMED_URL",
    "path": "/api/encounters",
    "collection": "encounters",
    "identity_params": {"patient_id": "patient_id"},
}
WRONG_IDENTITY_RECIPE = dict(TIER2_RECIPE, identity_fields={"subject": "patient_id"})
BROKEN_CONTRACT = mockmed_contract()
BROKEN_CONTRACT.contract_id = "short"

REFUSALS = [
    pytest.param(
        refusal(contract=contract_for(required=NO_REQUIRED), required_doc=NO_REQUIRED),
        "required_effects.json: the contract has no required effect",
        id="no-required-effect",
    ),
    pytest.param(
        refusal(
            contract=contract_for(keys=["patient_id", "site_id"], recipe=TWO_KEY_RECIPE),
            recipe_doc=TWO_KEY_RECIPE,
        ),
        r"contract identity keys \['site_id'\] are selected by no effect",
        id="identity-key-no-effect-selects",
    ),
    pytest.param(
        refusal(
            contract=contract_for(forbidden=FOREIGN_KEY_EFFECTS),
            forbidden_doc=FOREIGN_KEY_EFFECTS,
        ),
        r"effect 'stat_priority_set' references identity keys \['site_id'\]",
        id="effect-names-undeclared-identity-key",
    ),
    pytest.param(
        refusal(contract=contract_for(channel=OracleChannel.ORACLE_CHANNEL_FILE)),
        "recipe kind 'sql' cannot serve the contract's channel ORACLE_CHANNEL_FILE",
        id="sql-recipe-file-channel",
    ),
    pytest.param(
        refusal(contract=contract_for(channel=OracleChannel.ORACLE_CHANNEL_OCR)),
        "recipe kind 'sql' cannot serve the contract's channel ORACLE_CHANNEL_OCR",
        id="sql-recipe-tier0-channel",
    ),
    pytest.param(
        {**docs(0), "contract": contract_for(tier=0, channel=OracleChannel.ORACLE_CHANNEL_DB)},
        "recipe kind 'screen_dump' cannot serve the contract's channel ORACLE_CHANNEL_DB",
        id="screen-dump-posing-as-db",
    ),
    pytest.param(
        refusal(
            contract=contract_for(recipe=WRONG_IDENTITY_RECIPE),
            recipe_doc=WRONG_IDENTITY_RECIPE,
        ),
        r"identity_fields keys \['subject'\] differ",
        id="recipe-identity-fields-differ",
    ),
    pytest.param(
        refusal(contract=contract_for(recipe=ORDERS_RECIPE), recipe_doc=ORDERS_RECIPE),
        "lives in collection 'encounters' but the oracle recipe reads 'orders'",
        id="collection-differs",
    ),
    pytest.param(
        refusal(
            contract=contract_for(forbidden=FORBIDDEN_WITH_COUNT),
            forbidden_doc=FORBIDDEN_WITH_COUNT,
        ),
        "forbidden_effects.json: effect 'stat_priority_set' declares new_records",
        id="forbidden-with-count",
    ),
    pytest.param(
        refusal(contract=contract_for(recipe=CREDENTIAL_RECIPE), recipe_doc=CREDENTIAL_RECIPE),
        "oracle_recipe.json: oracle recipe key 'password' looks like a credential",
        id="recipe-credential",
    ),
    pytest.param(
        refusal(contract=contract_for(recipe=REST_RECIPE), recipe_doc=REST_RECIPE),
        "oracle_recipe.json: recipe kind 'rest' cannot serve the contract's channel "
        "ORACLE_CHANNEL_DB",
        id="recipe-rest-on-db-channel",
    ),
    pytest.param(
        refusal(certificate=make_certificate(mockmed_contract(tier=0))),
        "certificate.json: the certificate is for another contract",
        id="certificate-for-another-contract",
    ),
    pytest.param(
        refusal(certificate=make_certificate(epsilon=2.0)),
        "certificate.json: epsilon must be in",
        id="certificate-invalid",
    ),
    pytest.param(
        refusal(required_doc=NO_REQUIRED),
        "required_effects.json: digest mismatch",
        id="required-digest-mismatch",
    ),
    pytest.param(
        refusal(forbidden_doc=NO_REQUIRED),
        "forbidden_effects.json: digest mismatch",
        id="forbidden-digest-mismatch",
    ),
    pytest.param(
        refusal(recipe_doc=TIER0_RECIPE),
        "oracle_recipe.json: digest mismatch",
        id="recipe-digest-mismatch",
    ),
    pytest.param(
        refusal(contract=BROKEN_CONTRACT),
        "contract.json: contract_id 'short' is not a valid id",
        id="invalid-contract",
    ),
    pytest.param(
        refusal(calibration={**CALIBRATION, "reward_contract_digest": "sha256:" + "0" * 64}),
        "calibration.json: the summary is for another contract",
        id="calibration-for-another-contract",
    ),
]


@pytest.mark.parametrize(("arguments", "message"), REFUSALS)
def test_write_refuses(bundle_dir, arguments, message):
    with pytest.raises(ValidationError, match=message):
        write_bundle(bundle_dir, **arguments)
    # Nothing is written when a check fails.
    assert not bundle_dir.exists()


@pytest.mark.parametrize(("arguments", "message"), REFUSALS)
def test_load_refuses(bundle_dir, arguments, message):
    # Write the files by hand (write_bundle would refuse them) and load them.
    bundle_dir.mkdir(parents=True)
    texts = {
        "contract.json": json_format.MessageToJson(
            arguments["contract"], preserving_proto_field_name=True
        ),
        "required_effects.json": json.dumps(arguments["required_doc"]),
        "forbidden_effects.json": json.dumps(arguments["forbidden_doc"]),
        "oracle_recipe.json": json.dumps(arguments["recipe_doc"]),
    }
    if arguments.get("certificate") is not None:
        texts["certificate.json"] = json_format.MessageToJson(
            arguments["certificate"], preserving_proto_field_name=True
        )
    if arguments.get("calibration") is not None:
        texts["calibration.json"] = json.dumps(arguments["calibration"])
    for name, text in texts.items():
        (bundle_dir / name).write_text(text)
    with pytest.raises(ValidationError, match=message):
        load_bundle(bundle_dir)


class TestTampering:
    @pytest.fixture
    def written(self, bundle_dir):
        write_bundle(bundle_dir, **docs(), certificate=make_certificate())
        return bundle_dir

    def test_tampered_required_effects_names_the_file(self, written):
        doc = json.loads((written / "required_effects.json").read_text())
        doc["effects"][0]["new_records"] = 2
        (written / "required_effects.json").write_text(json.dumps(doc))
        with pytest.raises(ValidationError, match=r"required_effects\.json: digest mismatch"):
            load_bundle(written)

    def test_loosened_allowed_fields_is_caught(self, written):
        doc = json.loads((written / "required_effects.json").read_text())
        doc["effects"][0]["allowed_fields"].append("priority")
        (written / "required_effects.json").write_text(json.dumps(doc))
        with pytest.raises(ValidationError, match=r"required_effects\.json"):
            load_bundle(written)

    def test_tampered_recipe_names_the_file(self, written):
        doc = json.loads((written / "oracle_recipe.json").read_text())
        doc["database"]["sqlite_path"] = "../../other/decoy.sqlite"
        (written / "oracle_recipe.json").write_text(json.dumps(doc))
        with pytest.raises(ValidationError, match=r"oracle_recipe\.json: digest mismatch"):
            load_bundle(written)

    def test_reformatting_is_not_tampering(self, written):
        doc = json.loads((written / "required_effects.json").read_text())
        (written / "required_effects.json").write_text(json.dumps(doc, separators=(",", ":")))
        assert load_bundle(written).contract_digest == mockmed_contract_digest()

    def test_untrusted_certificate(self, written):
        stranger = TrustSet([SigningKey.from_seed(b"\x07" * 32).public_key])
        with pytest.raises(ValidationError, match=r"certificate\.json: .*not trusted"):
            load_bundle(written, trust=stranger)
        assert load_bundle(written).certificate is not None  # no trust given: not verified

    def test_forged_certificate_signature(self, written):
        doc = json.loads((written / "certificate.json").read_text())
        doc["expiry_policy_updates"] = 1000
        (written / "certificate.json").write_text(json.dumps(doc))
        with pytest.raises(ValidationError, match=r"certificate\.json: .*does not verify"):
            load_bundle(written, trust=TRUST)

    @pytest.mark.parametrize(
        "name",
        ["contract.json", "required_effects.json", "forbidden_effects.json", "oracle_recipe.json"],
    )
    def test_missing_file(self, written, name):
        (written / name).unlink()
        with pytest.raises(ValidationError, match=f"bundle file {name} is missing"):
            load_bundle(written)

    @pytest.mark.parametrize(
        ("name", "text", "message"),
        [
            ("required_effects.json", "{", "not valid JSON"),
            ("required_effects.json", '{"effects": [], "effects": []}', "duplicate key"),
            ("forbidden_effects.json", '{"effects": [{"x": NaN}]}', "not valid JSON"),
            ("oracle_recipe.json", "[]", "must be a JSON object"),
            ("contract.json", "{", "not a valid RewardContract"),
            ("contract.json", '{"contract_id": "x", "surprise": 1}', "not a valid RewardContract"),
            ("certificate.json", '{"epsilon": "high"}', "not a valid RewardCertificate"),
            ("calibration.json", "[1]", "must be a JSON object"),
        ],
    )
    def test_malformed_file_is_named(self, written, name, text, message):
        (written / name).write_text(text)
        with pytest.raises(ValidationError, match=f"{name}: .*{message}"):
            load_bundle(written)

    def test_not_utf8(self, written):
        (written / "oracle_recipe.json").write_bytes(b"\xff\xfe")
        with pytest.raises(ValidationError, match=r"oracle_recipe\.json: cannot be read"):
            load_bundle(written)


def test_missing_bundle_directory(tmp_path):
    with pytest.raises(ValidationError, match="does not exist"):
        load_bundle(tmp_path / "nope")


class TestWriteBundle:
    def test_rewriting_the_same_bundle_is_a_no_op(self, bundle_dir):
        write_bundle(bundle_dir, **docs())
        before = {p.name: p.stat().st_mtime_ns for p in bundle_dir.iterdir()}
        write_bundle(bundle_dir, **docs())
        assert {p.name: p.stat().st_mtime_ns for p in bundle_dir.iterdir()} == before

    def test_refuses_to_overwrite_different_content(self, bundle_dir):
        write_bundle(bundle_dir, **docs())
        original = (bundle_dir / "contract.json").read_text()
        with pytest.raises(
            ValidationError, match=r"already exist with different content"
        ) as caught:
            write_bundle(bundle_dir, **docs(0))
        assert "contract.json" in str(caught.value)
        assert "oracle_recipe.json" in str(caught.value)
        assert (bundle_dir / "contract.json").read_text() == original
        assert load_bundle(bundle_dir).tier == 2

    def test_overwrite_replaces(self, bundle_dir):
        write_bundle(bundle_dir, **docs())
        write_bundle(bundle_dir, **docs(0), overwrite=True)
        assert load_bundle(bundle_dir).contract_digest == mockmed_contract_digest(tier=0)

    def test_stale_optional_file_is_refused_then_removed(self, bundle_dir):
        write_bundle(bundle_dir, **docs(), certificate=make_certificate(), calibration=CALIBRATION)
        with pytest.raises(ValidationError, match=r"certificate\.json"):
            write_bundle(bundle_dir, **docs())
        write_bundle(bundle_dir, **docs(), overwrite=True)
        assert not (bundle_dir / "certificate.json").exists()
        assert not (bundle_dir / "calibration.json").exists()
        assert load_bundle(bundle_dir).certificate is None

    def test_adding_a_certificate_needs_no_overwrite(self, bundle_dir):
        write_bundle(bundle_dir, **docs())
        write_bundle(bundle_dir, **docs(), certificate=make_certificate())
        assert load_bundle(bundle_dir, trust=TRUST).certificate is not None

    def test_failed_replace_leaves_the_old_file_and_no_temp(self, bundle_dir, monkeypatch):
        write_bundle(bundle_dir, **docs())
        original = {p.name: p.read_bytes() for p in bundle_dir.iterdir()}

        def broken_replace(src, dst):
            raise OSError("disk full")

        monkeypatch.setattr(bundle_module.os, "replace", broken_replace)
        with pytest.raises(OSError, match="disk full"):
            write_bundle(bundle_dir, **docs(0), overwrite=True)
        assert {p.name: p.read_bytes() for p in bundle_dir.iterdir()} == original

    def test_files_are_readable(self, bundle_dir):
        write_bundle(bundle_dir, **docs())
        for path in bundle_dir.iterdir():
            assert os.stat(path).st_mode & 0o444 == 0o444


def test_an_effect_referring_to_an_undeclared_parameter_is_refused(bundle_dir):
    """R-MSG-11: ``{"param": ...}`` names a parameter of the contract, or the bundle is refused
    (at write and at load alike); the parameterized MockMed bundle itself loads."""
    contract = mockmed_parameterized_contract()
    good = {
        "contract": contract,
        "required_doc": PARAMETERIZED_REQUIRED_EFFECTS,
        "forbidden_doc": FORBIDDEN_EFFECTS,
        "recipe_doc": TIER2_RECIPE,
    }
    write_bundle(bundle_dir, **good)
    loaded = load_bundle(bundle_dir)
    assert loaded.required[0].parameter_names() == {"encounter_type", "note"}

    undeclared = copy.deepcopy(PARAMETERIZED_REQUIRED_EFFECTS)
    undeclared["effects"][0]["expect"]["status"] = {"param": "status"}
    rebound = mockmed_parameterized_contract()
    rebound.required_effects_digest = digest_json(undeclared)
    with pytest.raises(ValidationError, match=r"task parameters \['status'\] that the contract"):
        write_bundle(
            bundle_dir.parent / "other", **{**good, "contract": rebound, "required_doc": undeclared}
        )
