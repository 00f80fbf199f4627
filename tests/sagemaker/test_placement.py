"""Changing the instance type replaces the EndpointConfig and the endpoint (nothing with a fixed name blocks it);
changing only the model/engine settings rolls the same endpoint. Replacement is judged with CloudFormation's
own createOnly property lists (the provider schemas cfn-lint ships)."""

from __future__ import annotations

from tests.sagemaker.cfn_schema import create_only, replaced_by
from tests.sagemaker.conftest import placement


def _ids(p, type_: str) -> set[str]:
    return set(p.of_type(type_))


def test_the_update_rules_this_relies_on() -> None:
    assert "ProductionVariants" in create_only("AWS::SageMaker::EndpointConfig")
    assert "PrimaryContainer" in create_only("AWS::SageMaker::Model")
    assert create_only("AWS::SageMaker::Endpoint") == {"EndpointName"}  # a new EndpointConfigName is an in-place update
    assert "ResourceId" in create_only("AWS::ApplicationAutoScaling::ScalableTarget")


def test_instance_type_change_creates_a_new_endpoint_config_and_endpoint() -> None:
    a, b = placement("ml.c7g.8xlarge"), placement("ml.c8g.8xlarge")
    config_a, config_b = _ids(a, "AWS::SageMaker::EndpointConfig"), _ids(b, "AWS::SageMaker::EndpointConfig")
    assert len(config_a) == len(config_b) == 1 and config_a.isdisjoint(config_b)
    (ca,), (cb,) = (
        a.of_type("AWS::SageMaker::EndpointConfig").values(),
        b.of_type("AWS::SageMaker::EndpointConfig").values(),
    )
    assert [
        v["InstanceType"] for v in ca["Properties"]["ProductionVariants"] + cb["Properties"]["ProductionVariants"]
    ] == ["ml.c7g.8xlarge", "ml.c8g.8xlarge"]
    assert "EndpointConfigName" not in ca["Properties"] and "EndpointConfigName" not in cb["Properties"]

    # A new endpoint with a new name (SageMaker cannot change an autoscaled variant's instance type in place);
    # CloudFormation creates it, then deletes the old one — the old name never blocks the new resource.
    assert _ids(a, "AWS::SageMaker::Endpoint").isdisjoint(_ids(b, "AWS::SageMaker::Endpoint"))
    assert a.endpoint.endpoint_name != b.endpoint.endpoint_name
    assert a.endpoint.endpoint_name.startswith("llm-llama-8b-") and b.endpoint.endpoint_name.startswith("llm-llama-8b-")
    # Its scalable target and log group follow it.
    assert _ids(a, "AWS::ApplicationAutoScaling::ScalableTarget").isdisjoint(
        _ids(b, "AWS::ApplicationAutoScaling::ScalableTarget")
    )
    assert _ids(a, "AWS::Logs::LogGroup").isdisjoint(_ids(b, "AWS::Logs::LogGroup"))

    # Same vCPUs (32) → same engine environment → the Model is kept as is.
    ((ma_id, ma),) = a.of_type("AWS::SageMaker::Model").items()
    ((mb_id, mb),) = b.of_type("AWS::SageMaker::Model").items()
    assert ma_id == mb_id and replaced_by(ma, mb) == []


def test_instance_size_change_also_recomputes_the_engine() -> None:
    big, small = placement("ml.c7g.8xlarge"), placement("ml.c7g.4xlarge")
    ((mid, big_model),) = big.of_type("AWS::SageMaker::Model").items()
    small_model = small.of_type("AWS::SageMaker::Model")[mid]
    assert replaced_by(big_model, small_model) == ["PrimaryContainer"]
    env = small_model["Properties"]["PrimaryContainer"]["Environment"]
    assert (
        env["LLAMA_THREADS"] == "16"
        and big_model["Properties"]["PrimaryContainer"]["Environment"]["LLAMA_THREADS"] == "32"
    )
    assert _ids(big, "AWS::SageMaker::EndpointConfig").isdisjoint(_ids(small, "AWS::SageMaker::EndpointConfig"))


def test_engine_setting_change_rolls_the_same_endpoint() -> None:
    a, b = placement("ml.c7g.8xlarge"), placement("ml.c7g.8xlarge", context_window=2048)
    ((mid, ma),) = a.of_type("AWS::SageMaker::Model").items()
    mb = b.of_type("AWS::SageMaker::Model")[mid]
    assert replaced_by(ma, mb) == ["PrimaryContainer"]  # new Model (generated name) ...
    assert (
        ma["Properties"]["PrimaryContainer"]["Environment"]["LLAMA_CTX_PER_SLOT"],
        mb["Properties"]["PrimaryContainer"]["Environment"]["LLAMA_CTX_PER_SLOT"],
    ) == ("4096", "2048")
    ((cid, ca),) = a.of_type("AWS::SageMaker::EndpointConfig").items()
    # ... so the config's ModelName (GetAtt of the new Model) changes: a new EndpointConfig, generated name ...
    assert ca["Properties"]["ProductionVariants"][0]["ModelName"] == {"Fn::GetAtt": [mid, "ModelName"]}
    ((eid, ea),) = a.of_type("AWS::SageMaker::Endpoint").items()
    eb = b.of_type("AWS::SageMaker::Endpoint")[eid]
    # ... and the endpoint itself is updated in place (blue/green), same name, instance count retained.
    assert replaced_by(ea, eb) == [] and ea["Properties"]["EndpointName"] == eb["Properties"]["EndpointName"]
    assert eb["Properties"]["RetainAllVariantProperties"] is True
