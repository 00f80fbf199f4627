"""The rehearsal's model of CloudFormation + the kubectl handler, on small templates written here: each hazard class
is caught, and what is safe is not reported (a check that cannot fail is a defect, so every rule has both)."""

from __future__ import annotations

import json
from typing import Any

from cpu_inference._internal.k8s_object import Need
from cpu_inference.testing.rehearsal import (
    IMMUTABLE_FIELDS,
    assembly_from_templates,
    cfn_create_only,
    create_order,
    delete_order,
    plan,
)

NS = {"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": "farm"}}
NP = {
    "apiVersion": "networking.k8s.io/v1",
    "kind": "NetworkPolicy",
    "metadata": {"name": "deny", "namespace": "farm"},
    "spec": {"podSelector": {}},
}
SA = {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": {"name": "gw", "namespace": "farm"}}
CM = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "gw", "namespace": "farm"}, "data": {"a": "1"}}
DEPLOY = {
    "apiVersion": "apps/v1",
    "kind": "Deployment",
    "metadata": {"name": "gw", "namespace": "farm"},
    "spec": {
        "selector": {"matchLabels": {"app": "gw"}},
        "template": {
            "spec": {
                "serviceAccountName": "gw",
                "volumes": [{"name": "c", "configMap": {"name": "gw"}}],
                "containers": [{"name": "c", "image": "i"}],
            }
        },
    },
}
SCALED = {
    "apiVersion": "keda.sh/v1alpha1",
    "kind": "ScaledObject",
    "metadata": {"name": "gw", "namespace": "farm"},
    "spec": {},
}
CRD = {
    "apiVersion": "apiextensions.k8s.io/v1",
    "kind": "CustomResourceDefinition",
    "metadata": {"name": "scaledobjects.keda.sh"},
    "spec": {"group": "keda.sh"},
}


def manifest(
    *objs: dict[str, Any], deps: tuple[str, ...] = (), label: str | None = "aws.cdk.eks/prune-x"
) -> dict[str, Any]:
    props: dict[str, Any] = {"ClusterName": {"Ref": "Cluster"}, "Manifest": json.dumps(list(objs))}
    if label:
        props["PruneLabel"] = label
    return {"Type": "Custom::AWSCDK-EKS-KubernetesResource", "Properties": props, "DependsOn": list(deps)}


def template(**resources: dict[str, Any]) -> dict[str, Any]:
    return {"Resources": {"Cluster": {"Type": "AWS::EKS::Cluster", "Properties": {}}, **resources}}


def asm(**resources: dict[str, Any]):
    return assembly_from_templates({"S": template(**resources)})


def codes(findings) -> list[str]:
    return sorted(f.code for f in findings)


def test_a_namespaced_object_in_a_parallel_manifest_is_a_create_order_problem_and_a_dependency_fixes_it() -> None:
    race = create_order(asm(Ns=manifest(NS), Np=manifest(NP)))
    assert codes(race) == ["create-order"] and "namespace 'farm'" in race[0].message and race[0].where == "S/Np"
    assert create_order(asm(Ns=manifest(NS), Np=manifest(NP, deps=("Ns",)))) == []
    # A Ref counts as a dependency too, and so does a transitive one.
    mid = {"Type": "AWS::IAM::Role", "Properties": {"X": {"Fn::GetAtt": ["Ns", "Arn"]}}}
    np_ref = manifest(NP)
    np_ref["Properties"]["Other"] = {"Ref": "Mid"}
    assert create_order(asm(Ns=manifest(NS), Mid=mid, Np=np_ref)) == []


def test_file_order_within_one_manifest_counts_except_for_a_crd() -> None:
    assert create_order(asm(All=manifest(NS, SA, CM, DEPLOY))) == []
    assert (
        codes(create_order(asm(All=manifest(DEPLOY, NS, SA, CM)))) == ["create-order"] * 3
    )  # namespace, SA, ConfigMap after
    # A CR and its CRD in one kubectl apply fails (the REST mapping is resolved before anything is created).
    assert codes(create_order(asm(All=manifest(NS, CRD, SCALED)))) == ["create-order"]
    assert create_order(asm(Crd=manifest(CRD), All=manifest(NS, SCALED, deps=("Crd",)))) == []


def test_a_chart_provides_its_crds_and_namespace_and_pod_identity_must_come_first() -> None:
    chart = {
        "Type": "Custom::AWSCDK-EKS-HelmChart",
        "Properties": {"Chart": "keda", "Namespace": "farm", "CreateNamespace": True},
    }
    assert create_order(asm(Keda=chart, So=manifest(SCALED, deps=("Keda",)))) == []
    assert codes(create_order(asm(Keda=chart, So=manifest(SCALED)))) == [
        "create-order",
        "create-order",
    ]  # CRD and namespace
    skip = {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {"Chart": "keda", "SkipCrds": True}}
    missing = create_order(asm(Keda=skip, Ns=manifest(NS), So=manifest(SCALED, deps=("Keda", "Ns"))))
    assert codes(missing) == ["missing"] and "crd 'keda.sh'" in missing[0].message
    pia = {"Type": "AWS::EKS::PodIdentityAssociation", "Properties": {"Namespace": "farm", "ServiceAccount": "gw"}}
    late = create_order(asm(Pia=pia, All=manifest(NS, SA, CM, DEPLOY)))
    assert codes(late) == ["create-order"] and "podidentity 'farm/gw'" in late[0].message
    assert create_order(asm(Pia=pia, All=manifest(NS, SA, CM, DEPLOY, deps=("Pia",)))) == []


def test_a_dependency_stack_exists_first_and_assumed_namespaces_are_not_missing() -> None:
    two = assembly_from_templates(
        {"Platform": template(Ns=manifest(NS)), "App": template(Np=manifest(NP))}, {"App": ["Platform"]}
    )
    assert create_order(two) == []
    unordered = assembly_from_templates({"Platform": template(Ns=manifest(NS)), "App": template(Np=manifest(NP))})
    assert codes(create_order(unordered)) == ["create-order"]
    assert codes(create_order(asm(Np=manifest(NP)))) == ["missing"]
    assert create_order(asm(Np=manifest(NP)), assume=[Need("namespace", "farm")]) == []


def test_a_renamed_manifest_resource_deletes_what_the_new_template_declares() -> None:
    before, after = (
        asm(Ns=manifest(NS), A=manifest(SA, CM, deps=("Ns",))),
        asm(Ns=manifest(NS), B=manifest(SA, CM, deps=("Ns",))),
    )
    p = plan(before, after, create_only=lambda t: ())
    # Forward: cleanup deletes A (kubectl delete -f SA, CM); rollback: deleting the new B removes them too.
    assert codes(p.hazards) == ["deleted-while-declared"] * 2 + ["rollback-deletes"] * 2
    assert plan(before, before, create_only=lambda t: ()).hazards == []


def test_objects_leaving_a_surviving_manifest_are_pruned_or_left_and_moving_them_races() -> None:
    before = asm(Ns=manifest(NS), A=manifest(SA, CM, DEPLOY, deps=("Ns",)))
    after = asm(Ns=manifest(NS), A=manifest(DEPLOY, deps=("Ns",)))
    p = plan(before, after, create_only=lambda t: ())
    assert p.hazards == [] and [o["kind"] for o in p.leftovers] == ["ServiceAccount"]  # ConfigMap is pruned
    assert p.delete_commands() == ["kubectl delete serviceaccount gw -n farm"]
    assert sorted((c.action, c.key) for c in p.objects if c.action == "delete") == [
        ("delete", "/ConfigMap/farm/gw"),
        ("delete", "/ServiceAccount/farm/gw"),
    ]
    moved = plan(
        before,
        asm(Ns=manifest(NS), A=manifest(SA, DEPLOY, deps=("Ns",)), B=manifest(CM, deps=("Ns",))),
        create_only=lambda t: (),
    )
    assert codes(moved.hazards) == ["pruned-while-declared", "rollback-deletes"]
    no_prune = plan(asm(A=manifest(NS, CM, label=None)), asm(A=manifest(NS, label=None)), create_only=lambda t: ())
    assert [o["kind"] for o in no_prune.leftovers] == ["ConfigMap"]


def test_immutable_fields_are_caught_and_mutable_ones_are_not() -> None:
    pv = {
        "apiVersion": "v1",
        "kind": "PersistentVolume",
        "metadata": {"name": "pv"},
        "spec": {
            "capacity": {"storage": "1Gi"},
            "csi": {"driver": "s3.csi.aws.com", "volumeHandle": "pv", "volumeAttributes": {"cache": "emptyDir"}},
        },
    }
    pv2 = json.loads(json.dumps(pv))
    pv2["spec"]["csi"]["volumeAttributes"]["cacheEmptyDirSizeLimit"] = "10Gi"
    p = plan(asm(A=manifest(pv)), asm(A=manifest(pv2)), create_only=lambda t: ())
    assert codes(p.hazards) == ["immutable-field"] and "spec.csi" in p.hazards[0].message
    grown = json.loads(json.dumps(pv))
    grown["spec"]["capacity"]["storage"] = "2Gi"
    assert plan(asm(A=manifest(pv)), asm(A=manifest(grown)), create_only=lambda t: ()).hazards == []
    sel = json.loads(json.dumps(DEPLOY))
    sel["spec"]["selector"]["matchLabels"]["v"] = "2"
    assert codes(
        plan(asm(A=manifest(NS, SA, CM, DEPLOY)), asm(A=manifest(NS, SA, CM, sel)), create_only=lambda t: ()).hazards
    ) == ["immutable-field"]
    assert ("", "PersistentVolume") in IMMUTABLE_FIELDS and ("apps", "StatefulSet") in IMMUTABLE_FIELDS


def test_a_replaced_or_removed_bucket_is_a_hazard_from_cloudformations_own_schema() -> None:
    assert "BucketName" in cfn_create_only("AWS::S3::Bucket") and cfn_create_only("Custom::Thing") == ()
    b1 = {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "models-a"}, "DeletionPolicy": "Retain"}
    b2 = {"Type": "AWS::S3::Bucket", "Properties": {"BucketName": "models-b"}, "DeletionPolicy": "Retain"}
    p = plan(asm(B=b1), asm(B=b2))
    assert codes(p.hazards) == ["stateful-replaced"] and p.replaced == [
        "S/B (AWS::S3::Bucket): replaced (BucketName changed)"
    ]
    tagged = {**b1, "Properties": {**b1["Properties"], "Tags": [{"Key": "a", "Value": "b"}]}}
    assert plan(asm(B=b1), asm(B=tagged)).hazards == []  # an in-place update
    gone = plan(asm(B=b1), asm())  # the user removed the bucket: listed, retained, not a hazard
    assert gone.hazards == [] and gone.replaced == ["S/B (AWS::S3::Bucket): removed (retained, orphaned)"]
    renamed = plan(asm(B=b1), asm(B2=b1))  # the same fixed name under a new id: empty, and the create collides too
    assert codes(renamed.hazards) == ["identity-collision", "stateful-renamed"]
    assert any("starts empty" in h.message for h in renamed.hazards)


def test_a_custom_resource_whose_rollback_update_is_not_a_noop_is_reported() -> None:
    cr = lambda rev: {"Type": "Custom::ModelArtifact", "Properties": {"Revision": rev}}  # noqa: E731
    calls: list[tuple[Any, Any]] = []

    def probe(new: dict[str, Any], old: dict[str, Any]) -> str | None:
        calls.append((new, old))
        return "copies again" if old["Revision"] == "main" else None

    p = plan(
        asm(C=cr("main")), asm(C=cr("v2")), create_only=lambda t: (), rollback_probes={"Custom::ModelArtifact": probe}
    )
    assert codes(p.hazards) == ["rollback-not-noop"] and calls == [({"Revision": "v2"}, {"Revision": "main"})]
    assert (
        plan(
            asm(C=cr("abc")),
            asm(C=cr("v2")),
            create_only=lambda t: (),
            rollback_probes={"Custom::ModelArtifact": probe},
        ).hazards
        == []
    )


def test_a_named_resource_under_a_new_logical_id_collides_with_the_old_one_still_there() -> None:
    addon = {
        "Type": "AWS::EKS::Addon",
        "Properties": {"ClusterName": {"Ref": "Cluster"}, "AddonName": "aws-mountpoint-s3-csi-driver"},
    }
    moved = plan(asm(Old=addon), asm(New=addon))
    assert codes(moved.hazards) == ["identity-collision"] and "the create fails" in moved.hazards[0].message
    assert plan(asm(Old=addon), asm(Old=addon)).hazards == []
    other = {"Type": "AWS::EKS::Addon", "Properties": {"ClusterName": {"Ref": "Cluster"}, "AddonName": "vpc-cni"}}
    assert plan(asm(Old=addon), asm(New=other)).hazards == []
    generated = {"Type": "AWS::S3::Bucket", "Properties": {}}
    assert codes(plan(asm(A=generated), asm(B=generated)).hazards) == [
        "stateful-renamed"
    ]  # no fixed name: no collision


def test_the_model_copy_rollback_is_rehearsed_with_the_real_handler(monkeypatch) -> None:
    from cpu_inference.testing.rehearsal import model_copy_rollback
    from model_download import custom_resource

    old = {
        "ProjectName": "p",
        "Bucket": {"Ref": "B"},
        "KeyPrefix": "models/m",
        "HfRepo": "o/r",
        "File": "m.gguf",
        "Revision": "main",
        "Sha256": "",
    }
    new = {**old, "Revision": "v2"}
    assert model_copy_rollback(new, old) is None
    cr = lambda props: {"Type": "Custom::ModelArtifact", "Properties": props}  # noqa: E731
    assert plan(asm(C=cr(old)), asm(C=cr(new)), create_only=lambda t: ()).hazards == []
    # A handler that starts a build on every Update (the code before artifacts review finding 1) is caught.
    monkeypatch.setattr(custom_resource.RECEIPTS.__class__, "redeploy", lambda self, event: None)
    why = model_copy_rollback(new, old)
    assert why is not None and "codebuild.start_build" in why
    assert codes(plan(asm(C=cr(old)), asm(C=cr(new)), create_only=lambda t: ()).hazards) == ["rollback-not-noop"]


def test_an_object_finalized_by_a_charts_controller_must_be_deleted_before_the_chart() -> None:
    karpenter = {"Type": "Custom::AWSCDK-EKS-HelmChart", "Properties": {"Chart": "karpenter"}}
    pool = {"apiVersion": "karpenter.sh/v1", "kind": "NodePool", "metadata": {"name": "cpu"}}
    loose = delete_order(asm(Karpenter=karpenter, Pools=manifest(pool)))
    assert codes(loose) == ["delete-order"] and "karpenter chart" in loose[0].message
    assert delete_order(asm(Karpenter=karpenter, Pools=manifest(pool, deps=("Karpenter",)))) == []
    assert delete_order(asm(Pools=manifest(pool))) == []  # Karpenter installed outside the assembly: nothing to order
    # A platform stack deleted after the stack that uses it (cdk destroys dependents first).
    two = assembly_from_templates(
        {"Platform": template(Karpenter=karpenter), "App": template(Pools=manifest(pool))}, {"App": ["Platform"]}
    )
    assert delete_order(two) == []


def test_a_type_cloudformations_schemas_do_not_know_has_no_replacement_facts() -> None:
    assert cfn_create_only("AWS::Nope::Thing") == () and cfn_create_only("AWS::EKS::Addon")
