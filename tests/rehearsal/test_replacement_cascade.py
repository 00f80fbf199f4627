"""The replacement cascade of `plan`: a replaced resource gets a new physical id (CloudFormation user guide, "Update
behaviors of stack resources": Replacement "generates a new physical ID"), so what references it (Ref, Fn::GetAtt,
Fn::Sub) is replaced too when the referencing property is createOnly (the registry schema's createOnlyProperties,
as cfn-lint bundles them), else updated in place — even when its own template text did not change. Small templates
written here; the real schemas."""

from __future__ import annotations

import copy
from typing import Any

from cpu_inference.cli.main import main
from cpu_inference.testing.rehearsal import assembly_from_templates, cfn_fixed_name, plan

IMAGE = "123456789012.dkr.ecr.us-east-1.amazonaws.com/llama:1"
ROLE = "arn:aws:iam::123456789012:role/sm"


def model(url: str = "s3://b/m/", **extra: Any) -> dict[str, Any]:
    container = {"Image": IMAGE, "ModelDataUrl": url}
    return {
        "Type": "AWS::SageMaker::Model",
        "Properties": {"ExecutionRoleArn": ROLE, "PrimaryContainer": container, **extra},
    }


def config(model_ref: Any, **extra: Any) -> dict[str, Any]:
    variant = {
        "ModelName": model_ref,
        "VariantName": "AllTraffic",
        "InitialInstanceCount": 1,
        "InstanceType": "ml.c7g.xlarge",
    }
    return {"Type": "AWS::SageMaker::EndpointConfig", "Properties": {"ProductionVariants": [variant], **extra}}


def endpoint(config_ref: Any) -> dict[str, Any]:
    return {"Type": "AWS::SageMaker::Endpoint", "Properties": {"EndpointConfigName": config_ref}}


def asm(**resources: dict[str, Any]):
    return assembly_from_templates({"S": {"Resources": resources}})


def where(entries: list[str]) -> list[str]:
    return [e.split(" ")[0] for e in entries]


def farm(url: str, model_ref: Any = None) -> dict[str, dict[str, Any]]:
    return {
        "Model": model(url),
        "Config": config(model_ref if model_ref is not None else {"Fn::GetAtt": ["Model", "ModelName"]}),
        "Endpoint": endpoint({"Fn::GetAtt": ["Config", "EndpointConfigName"]}),
    }


def test_a_replaced_model_replaces_its_endpoint_config_and_updates_the_endpoint_in_place() -> None:
    """Model (PrimaryContainer createOnly) → EndpointConfig (ProductionVariants createOnly) → Endpoint
    (EndpointConfigName mutable: SageMaker's blue/green update). Only the Model's own text changed."""
    p = plan(asm(**farm("s3://b/m/")), asm(**farm("s3://b/m2/")))
    assert where(p.replaced) == ["S/Model", "S/Config"], p.text()
    assert where(p.updated) == ["S/Endpoint"], p.text()
    assert p.hazards == [], p.text()
    (config_line,) = [r for r in p.replaced if r.startswith("S/Config")]
    assert "references S/Model (AWS::SageMaker::Model), which is replaced" in config_line
    assert "ProductionVariants" in config_line
    assert "EndpointConfigName references S/Config" in p.updated[0]
    # `cpu-inference plan` prints the same lines (the Plan's text).
    assert config_line in p.text() and p.updated[0] in p.text()


def test_a_ref_replaces_like_a_getatt_and_so_does_a_sub() -> None:
    for ref in ({"Ref": "Model"}, {"Fn::Sub": "${Model.ModelName}"}, {"Fn::GetAtt": "Model.ModelName"}):
        p = plan(asm(**farm("s3://b/m/", ref)), asm(**farm("s3://b/m2/", ref)))
        assert where(p.replaced) == ["S/Model", "S/Config"], (ref, p.text())
        assert where(p.updated) == ["S/Endpoint"], (ref, p.text())


def test_a_reference_through_a_mutable_property_is_an_in_place_update_and_stops_the_chain() -> None:
    """A Lambda function's Environment is mutable: it follows the new Model's name in place; its own Arn keeps, so a
    Lambda permission (FunctionName createOnly) referencing the function is untouched."""
    fn = {
        "Type": "AWS::Lambda::Function",
        "Properties": {"Role": ROLE, "Environment": {"Variables": {"MODEL": {"Ref": "Model"}}}},
    }
    perm = {
        "Type": "AWS::Lambda::Permission",
        "Properties": {
            "FunctionName": {"Fn::GetAtt": ["Fn", "Arn"]},
            "Action": "lambda:InvokeFunction",
            "Principal": "s3.amazonaws.com",
        },
    }
    p = plan(asm(Model=model(), Fn=fn, Perm=perm), asm(Model=model("s3://b/m2/"), Fn=fn, Perm=perm))
    assert where(p.replaced) == ["S/Model"] and where(p.updated) == ["S/Fn"], p.text()
    assert "Environment references S/Model" in p.updated[0]


def test_an_in_place_update_does_not_cascade() -> None:
    """Tags on a Model are mutable: its name (what Ref and GetAtt return) keeps, so nothing referencing it moves."""
    tagged = {**farm("s3://b/m/"), "Model": model(Tags=[{"Key": "k", "Value": "v"}])}
    p = plan(asm(**farm("s3://b/m/")), asm(**tagged))
    assert p.replaced == [] and where(p.updated) == ["S/Model"], p.text()


def test_a_custom_resource_updated_in_place_moves_what_reads_its_attributes() -> None:
    """A custom resource's attributes are its handler's Data: an image build updated in place may return a new
    digest, so a Model whose PrimaryContainer.Image reads it (createOnly) is replaced, its EndpointConfig too, and
    the Endpoint moves in place. A plain Ref of the custom resource (its physical id) does not move anything."""

    def stack(tag: str, image: Any) -> dict[str, dict[str, Any]]:
        build = {"Type": "Custom::ContainerImageBuild", "Properties": {"ServiceToken": "arn:x", "Tag": tag}}
        m = model()
        m["Properties"]["PrimaryContainer"]["Image"] = image
        return {"Build": build, **farm("s3://b/m/"), "Model": m}

    digest = {"Fn::Join": ["", ["repo@", {"Fn::GetAtt": ["Build", "Digest-arm64"]}]]}
    p = plan(asm(**stack("a", digest)), asm(**stack("b", digest)))
    assert where(p.replaced) == ["S/Model", "S/Config"], p.text()
    assert where(p.updated) == ["S/Build", "S/Endpoint"], p.text()
    (model_line,) = [r for r in p.replaced if r.startswith("S/Model")]
    assert "an attribute of S/Build (Custom::ContainerImageBuild), which is updated" in model_line
    # Through Fn::Sub's `${Build.Digest}` the same; through a Ref nothing moves.
    sub = {"Fn::Sub": "repo@${Build.Digest}"}
    assert where(plan(asm(**stack("a", sub)), asm(**stack("b", sub))).replaced) == ["S/Model", "S/Config"]
    ref = {"Fn::Join": ["", ["repo:", {"Ref": "Build"}]]}
    q = plan(asm(**stack("a", ref)), asm(**stack("b", ref)))
    assert q.replaced == [] and where(q.updated) == ["S/Build"], q.text()


def test_a_resource_whose_own_mutable_text_changed_and_that_references_a_replaced_one_is_listed_once() -> None:
    before = farm("s3://b/m/")
    after = farm("s3://b/m2/")
    after["Endpoint"] = copy.deepcopy(after["Endpoint"])
    after["Endpoint"]["Properties"]["Tags"] = [{"Key": "k", "Value": "v"}]
    p = plan(asm(**before), asm(**after))
    assert where(p.updated) == ["S/Endpoint"] and "references S/Config" in p.updated[0], p.text()


def test_a_replaced_resource_with_a_fixed_name_collides_with_itself() -> None:
    """A custom-named resource cannot be replaced under the same name: CloudFormation creates the replacement
    before deleting the old one (CloudFormation template reference, "resource custom naming")."""
    assert cfn_fixed_name("AWS::SageMaker::EndpointConfig") == ("EndpointConfigName",)
    assert cfn_fixed_name("AWS::S3::Bucket") == ("BucketName",)
    assert cfn_fixed_name("AWS::IAM::Policy") == ()  # no name of its own to collide on
    named = lambda url: {  # noqa: E731
        **farm(url),
        "Config": config({"Fn::GetAtt": ["Model", "ModelName"]}, EndpointConfigName="farm-config"),
    }
    p = plan(asm(**named("s3://b/m/")), asm(**named("s3://b/m2/")))
    assert where(p.replaced) == ["S/Model", "S/Config"], p.text()
    (hazard,) = p.hazards
    assert (hazard.code, hazard.where) == ("identity-collision", "S/Config") and "farm-config" in hazard.message
    # A name that changes with the update does not collide; neither does a name built from the replaced resource.
    renamed = named("s3://b/m2/")
    renamed["Config"]["Properties"]["EndpointConfigName"] = "farm-config-2"
    assert plan(asm(**named("s3://b/m/")), asm(**renamed)).hazards == []
    derived = lambda url: {  # noqa: E731
        **farm(url),
        "Config": config({"Ref": "Model"}, EndpointConfigName={"Fn::Sub": "${Model.ModelName}-config"}),
    }
    assert plan(asm(**derived("s3://b/m/")), asm(**derived("s3://b/m2/"))).hazards == []


def test_a_resource_whose_own_change_replaces_it_under_a_fixed_name_collides_too() -> None:
    fixed = lambda url: {"Model": model(url, ModelName="farm-model")}  # noqa: E731
    p = plan(asm(**fixed("s3://b/m/")), asm(**fixed("s3://b/m2/")))
    assert [h.code for h in p.hazards] == ["identity-collision"] and "farm-model" in p.hazards[0].message


def test_the_plan_command_prints_the_cascade_with_its_reason(tmp_path, capsys) -> None:
    import json

    for name, url in (("before", "s3://b/m/"), ("after", "s3://b/m2/")):
        out = tmp_path / name
        out.mkdir()
        (out / "S.template.json").write_text(json.dumps({"Resources": farm(url)}))
        artifacts = {"S": {"type": "aws:cloudformation:stack", "properties": {"templateFile": "S.template.json"}}}
        (out / "manifest.json").write_text(json.dumps({"artifacts": artifacts}))
    assert main(["plan", str(tmp_path / "before"), str(tmp_path / "after")]) == 0
    out = capsys.readouterr().out
    assert "AWS resources replaced or removed: 2" in out and "AWS resources updated in place: 1" in out, out
    assert (
        "  S/Config (AWS::SageMaker::EndpointConfig): replaced (ProductionVariants references S/Model "
        "(AWS::SageMaker::Model), which is replaced)" in out
    ), out
    assert (
        "  S/Endpoint (AWS::SageMaker::Endpoint): updated in place (EndpointConfigName references S/Config "
        "(AWS::SageMaker::EndpointConfig), which is replaced)" in out
    ), out


def test_a_nested_stack_parameter_set_from_a_replaced_resource_carries_the_cascade_inside() -> None:
    """The parent passes the Model's name to a nested stack (its Parameters are mutable: the stack resource updates
    in place); inside, the EndpointConfig that Refs the parameter is replaced and the Endpoint follows in place."""

    def parent(url: str) -> dict[str, Any]:
        nested = {
            "Type": "AWS::CloudFormation::Stack",
            "Properties": {
                "TemplateURL": "https://s3/x.json",
                "Parameters": {"ModelName": {"Fn::GetAtt": ["Model", "ModelName"]}},
            },
        }
        return {"Resources": {"Model": model(url), "Nested": nested}}

    inner = {
        "Parameters": {"ModelName": {"Type": "String"}},
        "Resources": {
            "Config": config({"Ref": "ModelName"}),
            "Endpoint": endpoint({"Fn::GetAtt": ["Config", "EndpointConfigName"]}),
        },
    }
    two = lambda url: assembly_from_templates({"P": parent(url), "P/Nested": inner}, {"P/Nested": ["P"]})  # noqa: E731
    p = plan(two("s3://b/m/"), two("s3://b/m2/"))
    assert where(p.replaced) == ["P/Model", "P/Nested/Config"], p.text()
    assert sorted(where(p.updated)) == ["P/Nested", "P/Nested/Endpoint"], p.text()
    assert "parameter P/Nested/ModelName" in next(r for r in p.replaced if r.startswith("P/Nested/Config"))
