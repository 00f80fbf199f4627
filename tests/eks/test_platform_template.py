"""The synthesized EKS platform, read the way a reviewer would: charts and manifests in dependency order,
Karpenter's interruption plumbing, Pod Identity, access entries, KMS, the SOCI node class, and every
Kubernetes object validated against real schemas. One synth per session (tests/eks/conftest.py)."""

from __future__ import annotations

import json
import re
import subprocess
import sys
import tomllib
from pathlib import Path
from typing import Any

import pytest
import yaml

from cpu_inference.eks import INTERRUPTION_RULES
from cpu_inference.k8s.specs.bottlerocket import MIN_VERSION, parse_version
from tests.eks.conftest import ADMIN, Platform
from tests.support.cdk import cfn_lint_errors, nag_errors
from tests.support.k8s import SHARED_CRDS, helm_charts, is_custom, manifests, objects, validate_core, validate_custom

ROOT = Path(__file__).resolve().parents[2]
EXPECTED_RULES = {
    ("aws.health", "AWS Health Event"),
    ("aws.ec2", "EC2 Spot Instance Interruption Warning"),
    ("aws.ec2", "EC2 Instance Rebalance Recommendation"),
    ("aws.ec2", "EC2 Instance State-change Notification"),
    ("aws.ec2", "EC2 Capacity Reservation Instance Interruption Warning"),
}


def resources(t: dict[str, Any], type_: str) -> dict[str, dict[str, Any]]:
    return {k: r for k, r in t["Resources"].items() if r["Type"] == type_}


def depends_closure(t: dict[str, Any], lid: str) -> set[str]:
    """Everything `lid` waits for through DependsOn chains (transitively)."""
    seen: set[str] = set()
    todo = [lid]
    while todo:
        for dep in t["Resources"][todo.pop()].get("DependsOn", []):
            if dep not in seen:
                seen.add(dep)
                todo.append(dep)
    return seen


def chart_id(t: dict[str, Any], chart: str) -> str:
    (lid,) = [k for k, p in helm_charts(t).items() if p.get("Chart") == chart]
    return lid


def manifests_with(t: dict[str, Any], kind: str) -> dict[str, list[dict[str, Any]]]:
    return {lid: objs for lid, objs, _ in manifests(t) if any(o["kind"] == kind for o in objs)}


def refs_in(value: Any) -> set[str]:
    """Logical ids referenced (Ref / GetAtt) anywhere in a template fragment."""
    text = json.dumps(value)
    out = set()
    for part in text.split('"Ref": "')[1:]:
        out.add(part.split('"')[0])
    for part in text.split('"Fn::GetAtt": ["')[1:]:
        out.add(part.split('"')[0])
    return out


def test_order_is_crd_then_controller_then_node_classes_then_node_pools(platform: Platform) -> None:
    t = platform.template
    crd, controller = chart_id(t, "karpenter-crd"), chart_id(t, "karpenter")
    assert crd in depends_closure(t, controller)
    assert controller not in depends_closure(t, crd)
    classes = manifests_with(t, "EC2NodeClass")
    pools = manifests_with(t, "NodePool")
    assert classes and pools
    for lid in classes:
        assert {controller, crd} <= depends_closure(t, lid), lid
    class_by_name = {o["metadata"]["name"]: lid for lid, objs in classes.items() for o in objs}
    for lid, objs in pools.items():
        closure = depends_closure(t, lid)
        assert controller in closure
        for pool in objs:
            assert class_by_name[pool["spec"]["template"]["spec"]["nodeClassRef"]["name"]] in closure, pool["metadata"][
                "name"
            ]


def test_karpenter_charts_are_pinned_and_crds_come_from_the_crd_chart(platform: Platform) -> None:
    charts = helm_charts(platform.template)
    by_chart = {p["Chart"]: p for p in charts.values()}
    assert by_chart["karpenter-crd"]["Repository"] == "oci://public.ecr.aws/karpenter/karpenter-crd"
    assert by_chart["karpenter"]["Repository"] == "oci://public.ecr.aws/karpenter/karpenter"
    assert by_chart["karpenter-crd"]["Version"] == by_chart["karpenter"]["Version"] == "1.14.1"
    assert by_chart["karpenter"]["SkipCrds"] is True
    assert by_chart["keda"]["Repository"] == "https://kedacore.github.io/charts"
    assert by_chart["keda"]["Version"].startswith("2.20.")


def test_all_five_interruption_rules_feed_the_queue(platform: Platform) -> None:
    t = platform.template
    (queue_id,) = resources(t, "AWS::SQS::Queue")
    rules = resources(t, "AWS::Events::Rule")
    seen = set()
    for rule in rules.values():
        pattern = rule["Properties"]["EventPattern"]
        (source,), (detail_type,) = pattern["source"], pattern["detail-type"]
        seen.add((source, detail_type))
        assert [tg["Arn"] for tg in rule["Properties"]["Targets"]] == [{"Fn::GetAtt": [queue_id, "Arn"]}]
        if source == "aws.health":
            assert pattern["detail"] == {"eventTypeCategory": ["scheduledChange"]}
    assert seen == EXPECTED_RULES
    assert {(s, d) for s, d, _ in INTERRUPTION_RULES.values()} == EXPECTED_RULES


def test_interruption_queue_is_encrypted_short_lived_and_denies_http(platform: Platform) -> None:
    t = platform.template
    ((queue_id, queue),) = resources(t, "AWS::SQS::Queue").items()
    assert queue["Properties"]["SqsManagedSseEnabled"] is True
    assert queue["Properties"]["MessageRetentionPeriod"] == 300
    (policy,) = resources(t, "AWS::SQS::QueuePolicy").values()
    statements = policy["Properties"]["PolicyDocument"]["Statement"]
    (deny,) = [s for s in statements if s.get("Sid") == "DenyHTTP"]
    assert deny["Effect"] == "Deny" and deny["Action"] == "sqs:*"
    assert deny["Condition"] == {"Bool": {"aws:SecureTransport": "false"}}
    senders = [s for s in statements if s["Effect"] == "Allow"]
    assert len(senders) == 5 and all(s["Principal"] == {"Service": "events.amazonaws.com"} for s in senders)
    values = helm_charts(t)[chart_id(t, "karpenter")]["Values"]
    assert {"Fn::GetAtt": [queue_id, "QueueName"]} in values["Fn::Join"][1]


def _role_trusts_pod_identity(role: dict[str, Any]) -> bool:
    for st in role["Properties"]["AssumeRolePolicyDocument"]["Statement"]:
        if st.get("Principal") == {"Service": "pods.eks.amazonaws.com"} and sorted(st["Action"]) == [
            "sts:AssumeRole",
            "sts:TagSession",
        ]:
            return True
    return False


def test_pod_identity_for_karpenter_and_keda(platform: Platform) -> None:
    t = platform.template
    roles = resources(t, "AWS::IAM::Role")
    assocs = {
        (a["Properties"]["Namespace"], a["Properties"]["ServiceAccount"]): a
        for a in resources(t, "AWS::EKS::PodIdentityAssociation").values()
    }
    assert set(assocs) == {("kube-system", "karpenter"), ("keda", "keda-operator")}
    for assoc in assocs.values():
        (role_id,) = refs_in(assoc["Properties"]["RoleArn"])
        assert _role_trusts_pod_identity(roles[role_id]), role_id
    addons = [a["Properties"]["AddonName"] for a in resources(t, "AWS::EKS::Addon").values()]
    assert "eks-pod-identity-agent" in addons
    (agent_id,) = [
        k
        for k, a in resources(t, "AWS::EKS::Addon").items()
        if a["Properties"]["AddonName"] == "eks-pod-identity-agent"
    ]
    for chart in ("karpenter", "keda"):
        closure = depends_closure(t, chart_id(t, chart))
        assert agent_id in closure, chart
        assert any(k in closure for k in resources(t, "AWS::EKS::PodIdentityAssociation")), chart


def _statements(t: dict[str, Any], role_id: str) -> list[dict[str, Any]]:
    out = []
    for p in resources(t, "AWS::IAM::ManagedPolicy").values():
        if {"Ref": role_id} in p["Properties"].get("Roles", []):
            out += p["Properties"]["PolicyDocument"]["Statement"]
    for p in resources(t, "AWS::IAM::Policy").values():
        if {"Ref": role_id} in p["Properties"].get("Roles", []):
            out += p["Properties"]["PolicyDocument"]["Statement"]
    return out


def test_karpenter_controller_policy_follows_the_reference_scoping(platform: Platform) -> None:
    t = platform.template
    name = platform.cluster.cluster_name
    (assoc,) = [
        a
        for a in resources(t, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "karpenter"
    ]
    (role_id,) = refs_in(assoc["Properties"]["RoleArn"])
    statements = {s["Sid"]: s for s in _statements(t, role_id)}
    assert set(statements) == {
        "AllowScopedEC2InstanceAccessActions",
        "AllowScopedEC2LaunchTemplateAccessActions",
        "AllowScopedEC2InstanceActionsWithTags",
        "AllowScopedResourceCreationTagging",
        "AllowScopedResourceTagging",
        "AllowScopedDeletion",
        "AllowPassingInstanceRole",
        "AllowScopedInstanceProfileCreationActions",
        "AllowScopedInstanceProfileTagActions",
        "AllowScopedInstanceProfileActions",
        "AllowAPIServerEndpointDiscovery",
        "AllowInterruptionQueueActions",
        "AllowRegionalReadActions",
        "AllowSSMReadActions",
        "AllowPricingReadActions",
        "AllowUnscopedInstanceProfileListAction",
        "AllowInstanceProfileReadActions",
    }
    owned = f"aws:ResourceTag/kubernetes.io/cluster/{name}"
    for sid in ("AllowScopedEC2LaunchTemplateAccessActions", "AllowScopedResourceTagging", "AllowScopedDeletion"):
        assert statements[sid]["Condition"]["StringEquals"][owned] == "owned", sid
    with_tags = statements["AllowScopedEC2InstanceActionsWithTags"]["Condition"]["StringEquals"]
    assert with_tags == {
        f"aws:RequestTag/kubernetes.io/cluster/{name}": "owned",
        "aws:RequestTag/eks:eks-cluster-name": name,
    }
    (node_role_id,) = [k for k in resources(t, "AWS::IAM::Role") if k.startswith("KarpenterNodeRole")]
    assert statements["AllowPassingInstanceRole"]["Resource"] == {"Fn::GetAtt": [node_role_id, "Arn"]}
    (queue_id,) = resources(t, "AWS::SQS::Queue")
    assert statements["AllowInterruptionQueueActions"]["Resource"] == {"Fn::GetAtt": [queue_id, "Arn"]}
    assert sorted(statements["AllowInterruptionQueueActions"]["Action"]) == [
        "sqs:DeleteMessage",
        "sqs:GetQueueUrl",
        "sqs:ReceiveMessage",
    ]


def test_access_entries_for_admins_and_karpenter_nodes(platform: Platform) -> None:
    t = platform.template
    entries = list(resources(t, "AWS::EKS::AccessEntry").values())
    (admin,) = [e for e in entries if e["Properties"]["PrincipalArn"] == ADMIN]
    (policy,) = admin["Properties"]["AccessPolicies"]
    assert policy["AccessScope"] == {"Type": "cluster"}
    assert "AmazonEKSClusterAdminPolicy" in json.dumps(policy["PolicyArn"])
    (node,) = [e for e in entries if e["Properties"].get("Type") == "EC2_LINUX"]
    (node_role_id,) = refs_in(node["Properties"]["PrincipalArn"])
    node_role = t["Resources"][node_role_id]
    managed = json.dumps(node_role["Properties"]["ManagedPolicyArns"])
    for name in (
        "AmazonEKSWorkerNodePolicy",
        "AmazonEKS_CNI_Policy",
        "AmazonEC2ContainerRegistryPullOnly",
        "AmazonSSMManagedInstanceCore",
    ):
        assert f"policy/{name}" in managed, name


def test_cluster_encrypts_secrets_with_a_rotating_key_and_logs_everything(platform: Platform) -> None:
    t = platform.template
    (cluster,) = resources(t, "AWS::EKS::Cluster").values()
    props = cluster["Properties"]
    assert props["Version"] == "1.35"
    (enc,) = props["EncryptionConfig"]
    assert enc["Resources"] == ["secrets"]
    (key_id,) = refs_in(enc["Provider"]["KeyArn"])
    assert t["Resources"][key_id]["Type"] == "AWS::KMS::Key"
    assert t["Resources"][key_id]["Properties"]["EnableKeyRotation"] is True
    logged = {x["Type"] for x in props["Logging"]["ClusterLogging"]["EnabledTypes"]}
    assert logged == {"api", "audit", "authenticator", "controllerManager", "scheduler"}
    assert props["ResourcesVpcConfig"]["EndpointPrivateAccess"] is True
    assert props["AccessConfig"]["AuthenticationMode"] == "API"


def test_system_node_group_is_small_graviton_and_tainted_for_system_pods(platform: Platform) -> None:
    t = platform.template
    (ng,) = resources(t, "AWS::EKS::Nodegroup").values()
    p = ng["Properties"]
    assert p["InstanceTypes"] == ["m7g.large"] and p["AmiType"] == "BOTTLEROCKET_ARM_64"
    assert p["ScalingConfig"]["MinSize"] == p["ScalingConfig"]["DesiredSize"] == 2
    assert p["Taints"] == [{"Effect": "NO_SCHEDULE", "Key": "CriticalAddonsOnly", "Value": "true"}]
    assert p["Labels"] == {"cpu-inference/node-role": "system"}
    keda = helm_charts(t)[chart_id(t, "keda")]["Values"]
    keda_values = json.loads(keda) if isinstance(keda, str) else keda
    assert keda_values["nodeSelector"] == {"cpu-inference/node-role": "system"}
    assert {"key": "CriticalAddonsOnly", "operator": "Equal", "value": "true", "effect": "NoSchedule"} in keda_values[
        "tolerations"
    ]
    karpenter = platform.karpenter.chart_values()
    assert karpenter["nodeSelector"]["cpu-inference/node-role"] == "system"
    assert {"key": "CriticalAddonsOnly", "operator": "Exists"} in karpenter["tolerations"]


def test_soci_node_class_user_data_is_valid_toml_with_parallel_pull(platform: Platform) -> None:
    (node_class,) = [o for o in objects(platform.template) if o["kind"] == "EC2NodeClass"]
    spec = node_class["spec"]
    settings = tomllib.loads(spec["userData"])["settings"]
    assert settings["container-runtime"]["snapshotter"] == "soci"
    soci = settings["container-runtime-plugins"]["soci-snapshotter"]
    assert soci["pull-mode"] == "parallel-pull-unpack"
    assert set(soci["parallel-pull-unpack"]) >= {
        "max-concurrent-downloads-per-image",
        "concurrent-download-chunk-size",
        "max-concurrent-unpacks-per-image",
        "discard-unpacked-layers",
    }
    ((alias,),) = [t.values() for t in spec["amiSelectorTerms"]]
    family, version = alias.split("@")
    assert family == "bottlerocket" and parse_version(version) >= MIN_VERSION
    data = {b["deviceName"]: b["ebs"] for b in spec["blockDeviceMappings"]}["/dev/xvdb"]
    assert data == {
        "volumeType": "gp3",
        "volumeSize": "100Gi",
        "iops": 6000,
        "throughput": 500,
        "encrypted": True,
        "deleteOnTermination": True,
    }
    assert all(b["ebs"]["encrypted"] for b in spec["blockDeviceMappings"])
    assert spec["metadataOptions"]["httpTokens"] == "required"
    assert spec["metadataOptions"]["httpPutResponseHopLimit"] == 1
    name = platform.cluster.cluster_name
    assert spec["subnetSelectorTerms"] == [{"tags": {"karpenter.sh/discovery": name}}]
    assert spec["securityGroupSelectorTerms"] == [{"tags": {"aws:eks:cluster-name": name}}]
    tagged = [
        s
        for s in resources(platform.template, "AWS::EC2::Subnet").values()
        if {"Key": "karpenter.sh/discovery", "Value": name} in s["Properties"].get("Tags", [])
    ]
    assert len(tagged) == 3  # the private subnets, one per AZ


def test_default_pools_prefer_spot_with_on_demand_fallback(platform: Platform) -> None:
    pools = {o["metadata"]["name"]: o for o in objects(platform.template) if o["kind"] == "NodePool"}
    assert set(pools) == {"cpu-arm64", "cpu-amd64", "memory-optimized"}
    for pool in pools.values():
        reqs = {r["key"]: r for r in pool["spec"]["template"]["spec"]["requirements"]}
        assert reqs["karpenter.sh/capacity-type"]["values"] == ["spot", "on-demand"]
        assert reqs["karpenter.k8s.aws/instance-generation"] == {
            "key": "karpenter.k8s.aws/instance-generation",
            "operator": "Gt",
            "values": ["6"],
        }
        assert pool["spec"]["disruption"] == {
            "consolidationPolicy": "WhenEmptyOrUnderutilized",
            "consolidateAfter": "1m",
            "budgets": [{"nodes": "20%"}],
        }
    assert pools["memory-optimized"]["spec"]["template"]["spec"]["taints"][0]["key"] == "cpu-inference/memory-optimized"


def test_every_custom_object_validates_against_the_upstream_crds(platform: Platform) -> None:
    custom = [o for o in objects(platform.template) if is_custom(o)]
    assert {o["kind"] for o in custom} == {"EC2NodeClass", "NodePool", "ScaledObject", "TriggerAuthentication"}
    problems = [p for o in custom for p in validate_custom(o)]
    assert problems == []


def test_every_core_object_validates_against_kubernetes_1_35(platform: Platform) -> None:
    core = [o for o in objects(platform.template) if not is_custom(o)]
    assert sorted(o["kind"] for o in core) == ["ClusterRole", "ClusterRoleBinding", "Namespace"]
    assert [p for o in core for p in validate_core(o, "1.35")] == []


def test_no_manifest_exceeds_the_size_bound(platform: Platform) -> None:
    sizes = [size for _, _, size in manifests(platform.template)]
    assert sizes and max(sizes) < 200_000


def test_amp_workspace_scraper_and_keda_query_access(platform: Platform) -> None:
    t = platform.template
    (ws_id,) = resources(t, "AWS::APS::Workspace")
    (scraper,) = resources(t, "AWS::APS::Scraper").values()
    p = scraper["Properties"]
    assert p["Destination"]["AmpConfiguration"]["WorkspaceArn"] == {"Fn::GetAtt": [ws_id, "Arn"]}
    config = yaml.safe_load(p["ScrapeConfiguration"]["ConfigurationBlob"])
    assert config["global"]["scrape_interval"] == "30s"
    job, cadvisor = config["scrape_configs"]
    assert cadvisor["job_name"] == "cadvisor" and cadvisor["kubernetes_sd_configs"] == [{"role": "node"}]
    keep = job["relabel_configs"][0]
    assert keep == {
        "source_labels": ["__meta_kubernetes_pod_annotation_prometheus_io_scrape"],
        "action": "keep",
        "regex": "true",
    }
    (assoc,) = [
        a
        for a in resources(t, "AWS::EKS::PodIdentityAssociation").values()
        if a["Properties"]["ServiceAccount"] == "keda-operator"
    ]
    (role_id,) = refs_in(assoc["Properties"]["RoleArn"])
    (query,) = [s for s in _statements(t, role_id) if s.get("Sid") == "QueryAmpWorkspace"]
    assert query["Resource"] == {"Fn::GetAtt": [ws_id, "Arn"]}
    assert "aps:QueryMetrics" in query["Action"]
    (scaled,) = [o for o in objects(t) if o["kind"] == "ScaledObject"]
    assert all(
        tr["metadata"]["serverAddress"].startswith("https://aps-workspaces.us-east-1.amazonaws.com/workspaces/")
        for tr in scaled["spec"]["triggers"]
    )
    assert scaled["spec"]["advanced"]["scalingModifiers"] == {
        "formula": "running + (waiting * 10)",
        "target": "25",
        "activationTarget": "5",
        "metricType": "AverageValue",
    }
    (auth,) = [o for o in objects(t) if o["kind"] == "TriggerAuthentication"]
    assert auth["spec"] == {"podIdentity": {"provider": "aws"}}


def test_cdk_nag_is_clean(platform: Platform) -> None:
    assert nag_errors(platform.stack) == []
    # The validation report itself: the AwsSolutions pack ran and concluded success.
    report = json.loads((Path(platform.app.outdir) / "validation-report.json").read_text())
    conclusions = {r["pluginName"]: r["conclusion"] for r in report["pluginReports"]}
    assert conclusions == {"AwsSolutions": "success"}


def test_cfn_lint_is_clean(platform: Platform) -> None:
    assert cfn_lint_errors(platform.template) == []


def test_user_validation_command_checks_a_synthesized_template(platform: Platform, tmp_path: Path) -> None:
    """The documented reproducible path: `python -m cpu_inference.testing --crds DIR --template FILE` (the old
    `-m cpu_inference.testing.crd_validation` still works: tests/k8s/test_crd_cel.py, test_crd_validation.py run it)."""
    template = tmp_path / "Platform.template.json"
    template.write_text(json.dumps(platform.template))
    dump = tmp_path / "objects"
    cmd = [
        sys.executable,
        "-m",
        "cpu_inference.testing",
        "--crds",
        str(SHARED_CRDS),
        "--template",
        str(template),
        "--dump",
        str(dump),
    ]
    out = subprocess.run(cmd, cwd=ROOT / "constructs", capture_output=True, text=True)
    assert out.returncode == 0, out.stdout + out.stderr
    assert out.stdout.strip().endswith("0 problems")
    assert "6 custom objects" in out.stdout
    dumped = sorted(dump.glob("*.yaml"))
    assert len(dumped) == len(objects(platform.template))
    assert {yaml.safe_load(f.read_text())["kind"] for f in dumped} >= {"EC2NodeClass", "NodePool", "Namespace"}


def test_every_eks_add_on_is_pinned_to_a_version_for_the_cluster_minor(platform) -> None:
    """Unpinned add-ons take whatever EKS defaults to on deploy day: the same template would install
    different builds over time. Versions per `aws eks describe-addon-versions --kubernetes-version 1.35`."""
    from cpu_inference.eks.inference_cluster import POD_IDENTITY_AGENT_VERSION, VPC_CNI_VERSION

    addons = {
        a["Properties"]["AddonName"]: a["Properties"].get("AddonVersion")
        for a in resources(platform.template, "AWS::EKS::Addon").values()
    }
    assert addons == {"vpc-cni": VPC_CNI_VERSION, "eks-pod-identity-agent": POD_IDENTITY_AGENT_VERSION}
    assert all(re.fullmatch(r"v\d+\.\d+\.\d+-eksbuild\.\d+", v) for v in addons.values())


def test_add_on_versions_are_props_and_malformed_ones_are_refused() -> None:
    from cpu_inference.eks import InferenceClusterProps

    with pytest.raises(ValueError, match=r"vpc_cni_version '1.21.1' must look like v1.21.1-eksbuild.8"):
        InferenceClusterProps(vpc_cni_version="1.21.1").validate()
    InferenceClusterProps(vpc_cni_version=None, pod_identity_agent_version="v1.3.10-eksbuild.3").validate()


def test_network_policies_are_enforced_by_the_vpc_cni_agent(platform) -> None:
    """NetworkPolicies are only enforced when the VPC CNI runs its network policy agent."""
    addons = [r["Properties"] for r in platform.template["Resources"].values() if r["Type"] == "AWS::EKS::Addon"]
    cni = [a for a in addons if a["AddonName"] == "vpc-cni"]
    assert len(cni) == 1
    assert json.loads(cni[0]["ConfigurationValues"]) == {"enableNetworkPolicy": "true"}
    assert cni[0]["ResolveConflicts"] == "OVERWRITE"


def test_the_amp_collector_can_discover_and_read_cadvisor(platform) -> None:
    """AMP creates the collector's access entry itself on an API-auth-mode cluster (AMP user guide,
    "Configuring your Amazon EKS cluster"; its access policy grants get/list/watch on nodes, nodes/proxy,
    pods, services, endpoints and GET /metrics) and EKS allows one access entry per principal
    (botocore eks CreateAccessEntry.principalArn): the stack must not create a second one for the scraper
    role, or the deploy fails. The guide's manual-path RBAC (user aps-collector-user) stays read-only and
    covers the node proxy the cAdvisor job uses."""
    res = list(platform.template["Resources"].values())
    (scraper_id,) = [k for k, r in platform.template["Resources"].items() if r["Type"] == "AWS::APS::Scraper"]
    entries = [r["Properties"] for r in res if r["Type"] == "AWS::EKS::AccessEntry"]
    assert entries, "the admin and Karpenter node entries are expected"
    assert not [
        e for e in entries if scraper_id in json.dumps(e["PrincipalArn"]) or e.get("Username") == "aps-collector-user"
    ]
    from tests.support import k8s

    roles = [
        o
        for o in k8s.objects(platform.template)
        if o["kind"] == "ClusterRole" and o["metadata"]["name"] == "aps-collector-role"
    ]
    assert len(roles) == 1
    verbs = {v for rule in roles[0]["rules"] for v in rule["verbs"]}
    assert verbs <= {"get", "list", "watch"}
    assert any("nodes/proxy" in rule.get("resources", []) for rule in roles[0]["rules"])
    scraper = next(r["Properties"] for r in res if r["Type"] == "AWS::APS::Scraper")
    jobs = {
        j["job_name"] for j in yaml.safe_load(scraper["ScrapeConfiguration"]["ConfigurationBlob"])["scrape_configs"]
    }
    assert {"annotated-pods", "cadvisor"} <= jobs
