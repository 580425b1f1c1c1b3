"""Task parameters: the declaration (R-MSG-11), binding values against it and their digest
(R-W-18), and effects that refer to them."""

from __future__ import annotations

import pytest

from rewardseal.core.contract import contract_digest
from rewardseal.core.digest import digest_json
from rewardseal.core.errors import InvalidTaskParameters, ValidationError
from rewardseal.core.judging import ParamRef, bind_parameters, parse_effects
from rewardseal.core.receipts import expected_parameters_digest
from rewardseal.core.task_parameters import bound_values, parameters_digest, to_wire
from rewardseal.core.validation import validate_contract
from rewardseal.v1.contract_pb2 import RewardContract, TaskParameter
from rewardseal.v1.enums_pb2 import TaskParameterType
from rewardseal.v1.episode_pb2 import TaskParameterValue
from rewardseal_mockmed.contract import mockmed_contract

STRING = TaskParameterType.TASK_PARAMETER_TYPE_STRING
INTEGER = TaskParameterType.TASK_PARAMETER_TYPE_INTEGER
NUMBER = TaskParameterType.TASK_PARAMETER_TYPE_NUMBER
BOOLEAN = TaskParameterType.TASK_PARAMETER_TYPE_BOOLEAN


def orders_contract() -> RewardContract:
    contract = mockmed_contract()
    contract.task_parameters.extend(
        [
            TaskParameter(name="sku", type=STRING, max_length=8),
            TaskParameter(name="qty", type=INTEGER, minimum=1, maximum=99),
            TaskParameter(name="price", type=NUMBER, minimum=0),
            TaskParameter(name="gift", type=BOOLEAN),
            TaskParameter(name="kind", type=STRING, max_length=8, allowed_values=["a", "b"]),
        ]
    )
    return contract


GOOD = {"sku": "S-1", "qty": 3, "price": 9.5, "gift": False, "kind": "a"}


def test_a_contract_with_parameters_validates_and_binds_its_values():
    contract = orders_contract()
    validate_contract(contract)
    bound = bound_values(contract, to_wire(GOOD))
    assert bound == GOOD
    assert parameters_digest(contract, bound) == digest_json(GOOD)
    assert expected_parameters_digest(to_wire(GOOD)) == parameters_digest(contract, bound)


def test_a_number_takes_an_integer_and_the_digest_stays_what_the_client_computes():
    contract = orders_contract()
    sent = to_wire({**GOOD, "price": 10})
    bound = bound_values(contract, sent)
    assert bound["price"] == 10.0
    assert isinstance(bound["price"], float)
    assert parameters_digest(contract, bound) == expected_parameters_digest(sent)


def test_a_contract_without_parameters_has_the_empty_digest():
    contract = mockmed_contract()
    assert bound_values(contract, {}) == {}
    assert parameters_digest(contract, {}) == ""
    assert expected_parameters_digest({}) == ""


@pytest.mark.parametrize(
    ("values", "parameter", "words"),
    [
        ({k: v for k, v in GOOD.items() if k != "qty"}, "qty", "missing"),
        ({**GOOD, "color": "red"}, "color", "not a parameter"),
        ({**GOOD, "qty": "3"}, "qty", "must be an integer"),
        ({**GOOD, "qty": True}, "qty", "must be an integer"),
        ({**GOOD, "gift": 1}, "gift", "must be a boolean"),
        ({**GOOD, "sku": 5}, "sku", "must be a string"),
        ({**GOOD, "qty": 0}, "qty", "below its minimum"),
        ({**GOOD, "qty": 100}, "qty", "above its maximum"),
        ({**GOOD, "price": -0.5}, "price", "below its minimum"),
        ({**GOOD, "price": float("nan")}, "price", "finite"),
        ({**GOOD, "sku": "S" * 9}, "sku", "longer than 8"),
        ({**GOOD, "kind": "c"}, "kind", "allowed values"),
    ],
)
def test_bad_values_are_refused_naming_the_parameter(values, parameter, words):
    with pytest.raises(InvalidTaskParameters, match=words) as caught:
        bound_values(orders_contract(), to_wire(values))
    assert caught.value.reason == "invalid_task_parameters"
    assert caught.value.metadata["parameter"] == parameter


def test_a_value_with_no_kind_is_refused():
    values = to_wire(GOOD)
    values["qty"] = TaskParameterValue()
    with pytest.raises(InvalidTaskParameters, match="got no value"):
        bound_values(orders_contract(), values)


def test_a_refusal_quotes_a_short_prefix_only():
    secret = "Z" * 5000
    with pytest.raises(InvalidTaskParameters) as caught:
        bound_values(orders_contract(), to_wire({**GOOD, "kind": secret}))
    assert secret[:100] not in caught.value.message
    with pytest.raises(InvalidTaskParameters) as caught:
        bound_values(orders_contract(), to_wire({**GOOD, secret: 1}))
    assert len(caught.value.message) < 200
    assert len(caught.value.metadata["parameter"]) <= 64


def test_to_wire_refuses_other_python_types():
    with pytest.raises(InvalidTaskParameters) as caught:
        to_wire({"qty": [3]})  # type: ignore[dict-item]
    assert caught.value.metadata["parameter"] == "qty"


@pytest.mark.parametrize(
    ("parameter", "words"),
    [
        (TaskParameter(name="x", type=TaskParameterType.TASK_PARAMETER_TYPE_UNSPECIFIED), "type"),
        (TaskParameter(name="x", type=STRING), "max_length"),
        (TaskParameter(name="x", type=STRING, max_length=5000), "max_length"),
        (TaskParameter(name="x", type=STRING, max_length=4, minimum=1), "numbers only"),
        (TaskParameter(name="x", type=STRING, max_length=2, allowed_values=["abc"]), "longer"),
        (TaskParameter(name="x", type=STRING, max_length=2, allowed_values=["a", "a"]), "unique"),
        (TaskParameter(name="x", type=INTEGER, max_length=2), "strings only"),
        (TaskParameter(name="x", type=INTEGER, minimum=1.5), "whole number"),
        (TaskParameter(name="x", type=INTEGER, minimum=5, maximum=1), "above maximum"),
        (TaskParameter(name="x", type=NUMBER, maximum=float("inf")), "finite"),
        (TaskParameter(name="x", type=BOOLEAN, minimum=0), "numbers only"),
        (TaskParameter(name="bad name", type=BOOLEAN), "not a valid name"),
    ],
)
def test_bad_declarations_are_refused(parameter, words):
    contract = mockmed_contract()
    contract.task_parameters.append(parameter)
    with pytest.raises(ValidationError, match=words):
        validate_contract(contract)


def test_repeated_and_too_many_declarations_are_refused():
    contract = mockmed_contract()
    contract.task_parameters.extend([TaskParameter(name="x", type=BOOLEAN)] * 2)
    with pytest.raises(ValidationError, match="unique"):
        validate_contract(contract)
    contract = mockmed_contract()
    contract.task_parameters.extend(TaskParameter(name=f"p{i}", type=BOOLEAN) for i in range(33))
    with pytest.raises(ValidationError, match="at most 32"):
        validate_contract(contract)


def test_the_existing_contract_digest_is_unchanged_by_the_new_field():
    # A contract declaring no parameters digests as before (the empty list is not serialized).
    contract = mockmed_contract()
    assert "task_parameters" not in str(contract)
    assert contract_digest(contract) == contract_digest(
        RewardContract.FromString(contract.SerializeToString())
    )


def test_effects_refer_to_parameters_and_bind_them():
    doc = {
        "effects": [
            {
                "name": "order_created",
                "collection": "orders",
                "select": {"customer_id": {"identity": "customer_id"}, "sku": {"param": "sku"}},
                "expect": {"qty": {"param": "qty"}, "status": "pending"},
            }
        ]
    }
    (spec,) = parse_effects(doc)
    assert spec.parameter_names() == {"sku", "qty"}
    assert spec.select["sku"] == ParamRef("sku")
    record = {"id": "1", "customer_id": "c1", "sku": "S-1", "qty": 3, "status": "pending"}
    # Unbound, a reference matches nothing: a forgotten binding never pays.
    assert not spec.matches(record, {"customer_id": "c1"})
    (bound,) = bind_parameters((spec,), {"sku": "S-1", "qty": 3})
    assert bound.matches(record, {"customer_id": "c1"})
    assert bound.expect["qty"] == 3
    (other,) = bind_parameters((spec,), {"sku": "S-2", "qty": 3})
    assert not other.matches(record, {"customer_id": "c1"})


@pytest.mark.parametrize(
    "select", [{"sku": {"param": 3}}, {"sku": {"param": "a b"}}, {"sku": {"param": "x", "y": 1}}]
)
def test_malformed_parameter_references_are_refused(select):
    doc = {"effects": [{"name": "e", "collection": "orders", "select": select}]}
    with pytest.raises(ValidationError, match=r"select\.sku"):
        parse_effects(doc)
