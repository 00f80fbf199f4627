"""A deploy rehearsal: how CloudFormation and the aws-eks-v2 kubectl handler apply a synthesized cloud assembly,
checked offline. Plain Python over the synthesized templates (no jsii, no AWS account).

What it models, and from which source:

- CloudFormation creates resources in any order consistent with the dependency graph (DependsOn, Ref, Fn::GetAtt,
  Fn::Sub references), in parallel ("AWS CloudFormation creates … resources in parallel" unless a dependency says
  otherwise — CloudFormation user guide, DependsOn attribute). So "A exists before B in every allowed order" holds
  exactly when A is a transitive dependency of B, or A's stack is a dependency of B's stack (cdk deploys dependency
  stacks first: the assembly manifest's `dependencies`).
- An update creates new logical ids and updates changed ones in that order, then deletes the logical ids that left
  the template in UPDATE_COMPLETE_CLEANUP_IN_PROGRESS, after every new resource exists (CloudFormation user guide,
  "Update behaviors of stack resources" / stack status codes). A failed update rolls back: resources it created are
  deleted, resources it updated get another Update with the old properties (custom resources included:
  aws/aws-cdk#17040, #29581). A change to a createOnly property (the resource provider schema's
  `createOnlyProperties`, bundled with cfn-lint) replaces the resource: new physical resource, old one deleted.
  The replacement's new physical id and attributes reach every Ref / Fn::GetAtt / Fn::Sub of it: a referrer whose
  referencing property is createOnly is replaced in turn (e.g. Model → EndpointConfig), any other is updated in
  place (→ Endpoint), even with an unchanged template text (_cascade). A custom resource updated in place may
  return new attributes (its handler's Data: an image build's digest), so what reads them by Fn::GetAtt moves the
  same way. A replaced resource the template names collides with itself: the replacement is created first
  (cfn_fixed_name).
- The kubectl handler (aws-cdk-lib 2.275 custom-resource-handlers/dist/aws-eks-v2/kubectl-handler/apply/__init__.py):
  Create → `kubectl apply -f` (Overwrite) or `create`; Update → `kubectl apply -f <new> --prune -l <PruneLabel>`;
  Delete → `kubectl delete -f <old manifest>` (by name, no label filter). It retries only `i/o timeout`; any other
  error fails the resource. Objects in one manifest are applied in file order, so a Namespace earlier in the same
  manifest exists for the objects after it — but a custom resource whose CRD is created by the same `kubectl apply`
  fails (kubectl resolves every object's REST mapping first: "ensure CRDs are installed first",
  kubernetes/kubectl#1117). `--prune` deletes only kinds on kubectl's default allowlist (k8s_object.PRUNED_KINDS).
- The Helm handler (kubectl-handler/helm/__init__.py) installs a chart's CRDs with the release unless SkipCrds; a
  chart's CreateNamespace creates its namespace.
- The API server refuses changes to immutable fields (IMMUTABLE_FIELDS, each with its validation source).

Checks: `delete_order(assembly)` — a stack delete removes every object whose finalizer a chart's controller clears
before that chart. `create_order(assembly)` — every namespaced object's Namespace, every custom resource's CRD, every
ServiceAccount and Pod Identity association a pod uses, every ConfigMap/Secret it mounts, every CSI driver add-on a
PersistentVolume names, exist before it in every allowed order. `plan(before, after)` — the Kubernetes objects
created/changed/deleted, the AWS resources replaced, and the hazards of the update and of its rollback.
`cpu-inference plan` prints the same."""

from __future__ import annotations

import contextlib
import functools
import hashlib
import io
import json
import re
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from cpu_inference._internal.k8s_object import (
    BUILTIN_GROUPS,
    BUILTIN_NAMESPACES,
    Need,
    api_group,
    is_pruned,
    needs,
    object_key,
    provides,
)
from cpu_inference.testing.crd_validation import MANIFEST_TYPE, flatten

HELM_CHART = "Custom::AWSCDK-EKS-HelmChart"
POD_IDENTITY = "AWS::EKS::PodIdentityAssociation"
ADDON = "AWS::EKS::Addon"

# The API groups whose CRDs each Helm chart we install ships in its crds/ directory (karpenter-crd 1.14.1 and
# karpenter: karpenter.sh NodePool/NodeClaim + karpenter.k8s.aws EC2NodeClass; keda 2.20.2: keda.sh
# ScaledObject/ScaledJob/TriggerAuthentication/ClusterTriggerAuthentication — the upstream CRDs in ../shared/crds).
CHART_CRD_GROUPS: Mapping[str, tuple[str, ...]] = {
    "karpenter-crd": ("karpenter.sh", "karpenter.k8s.aws"),
    "karpenter": ("karpenter.sh", "karpenter.k8s.aws"),
    "keda": ("keda.sh", "eventing.keda.sh"),
}
# EKS add-ons that register a CSI driver (EKS user guide, "Amazon EKS add-ons"; the driver name each add-on's chart
# registers).
ADDON_CSI_DRIVERS: Mapping[str, str] = {
    "aws-mountpoint-s3-csi-driver": "s3.csi.aws.com",
    "aws-ebs-csi-driver": "ebs.csi.aws.com",
    "aws-efs-csi-driver": "efs.csi.aws.com",
}

# Fields the API server refuses to change on update, as (API group, kind) → JSON paths (dotted) that must stay equal.
IMMUTABLE_FIELDS: Mapping[tuple[str, str], tuple[str, ...]] = {
    # kubernetes pkg/apis/core/validation/validation.go ValidatePersistentVolumeUpdate: "spec.persistentvolumesource
    # is immutable after creation", volumeMode and nodeAffinity immutable. The volume source is every key of spec
    # other than the mutable ones (capacity, accessModes, claimRef, mountOptions, persistentVolumeReclaimPolicy,
    # storageClassName, volumeAttributesClassName).
    ("", "PersistentVolume"): (
        "spec.csi",
        "spec.hostPath",
        "spec.nfs",
        "spec.local",
        "spec.awsElasticBlockStore",
        "spec.volumeMode",
        "spec.nodeAffinity",
    ),
    # ValidatePersistentVolumeClaimUpdate: "spec is immutable after creation except resources.requests and
    # volumeAttributesClassName for bound claims".
    ("", "PersistentVolumeClaim"): (
        "spec.accessModes",
        "spec.selector",
        "spec.storageClassName",
        "spec.volumeName",
        "spec.volumeMode",
        "spec.dataSource",
        "spec.dataSourceRef",
    ),
    # pkg/apis/apps/validation ValidateStatefulSetUpdate: "updates to statefulset spec for fields other than 'replicas',
    # 'ordinals', 'template', 'updateStrategy', 'revisionHistoryLimit', 'persistentVolumeClaimRetentionPolicy' and
    # 'minReadySeconds' are forbidden".
    ("apps", "StatefulSet"): (
        "spec.selector",
        "spec.serviceName",
        "spec.volumeClaimTemplates",
        "spec.podManagementPolicy",
    ),
    # ValidateDeploymentUpdate / ValidateDaemonSetUpdate (apps/v1): "field is immutable" for spec.selector.
    ("apps", "Deployment"): ("spec.selector",),
    ("apps", "DaemonSet"): ("spec.selector",),
    # pkg/apis/batch/validation ValidateJobSpecUpdate: selector and template immutable (outside suspend edits).
    ("batch", "Job"): ("spec.selector", "spec.template", "spec.completionMode"),
    # ValidateServiceUpdate: clusterIP/clusterIPs immutable once set ("field is immutable").
    ("", "Service"): ("spec.clusterIP", "spec.clusterIPs"),
    # pkg/apis/storage/validation ValidateStorageClassUpdate: parameters, provisioner, reclaimPolicy, volumeBindingMode.
    ("storage.k8s.io", "StorageClass"): ("parameters", "provisioner", "reclaimPolicy", "volumeBindingMode"),
}

# AWS resources that hold state a replacement would lose or orphan.
STATEFUL_TYPES = frozenset(
    {
        "AWS::S3::Bucket",
        "AWS::ECR::Repository",
        "AWS::KMS::Key",
        "AWS::Logs::LogGroup",
        "AWS::EKS::Cluster",
        "AWS::DynamoDB::Table",
        "AWS::EFS::FileSystem",
        "AWS::SecretsManager::Secret",
        "AWS::APS::Workspace",
    }
)

_TOKEN = re.compile(r"\$\{([^}!][^}]*)\}")


# ----------------------------------------------------------------------------------------------------- the model


@dataclass(frozen=True)
class Finding:
    """One create-order problem or update hazard: `code` names the class, `where` the stack and logical id."""

    code: str
    where: str
    message: str

    def __str__(self) -> str:
        return f"[{self.code}] {self.where}: {self.message}"


@dataclass
class Manifest:
    """One KubernetesManifest resource: its objects in file order."""

    stack: str
    logical_id: str
    objects: list[dict[str, Any]]
    prune_label: str | None

    @property
    def where(self) -> str:
        return f"{self.stack}/{self.logical_id}"


@dataclass
class Stack:
    name: str
    template: dict[str, Any]
    depends_on_stacks: tuple[str, ...] = ()
    manifests: dict[str, Manifest] = field(default_factory=dict)
    _deps: dict[str, set[str]] = field(default_factory=dict)
    _ancestors: dict[str, frozenset[str]] = field(default_factory=dict)

    @property
    def resources(self) -> dict[str, dict[str, Any]]:
        return self.template.get("Resources", {})

    def ancestors(self, logical_id: str) -> frozenset[str]:
        """Every logical id CloudFormation must finish before it starts `logical_id`."""
        if logical_id not in self._ancestors:
            deps = lambda lid: self._deps.get(lid, ())  # noqa: E731
            self._ancestors[logical_id] = frozenset(_reachable(deps(logical_id), deps))
        return self._ancestors[logical_id]


@dataclass
class Assembly:
    stacks: dict[str, Stack]

    def stack_ancestors(self, name: str) -> set[str]:
        """The stacks of this assembly cdk deploys before `name` (and destroys after it)."""
        deps = lambda s: self.stacks[s].depends_on_stacks if s in self.stacks else ()  # noqa: E731
        return {s for s in _reachable(deps(name), deps) if s in self.stacks}


def _reachable(starts: Iterable[str], edges: Callable[[str], Iterable[str]]) -> set[str]:
    """Every node reachable from `starts` (included) along `edges`."""
    out: set[str] = set()
    todo = list(starts)
    while todo:
        n = todo.pop()
        if n not in out:
            out.add(n)
            todo.extend(edges(n))
    return out


def _refs(value: Any, out: set[str]) -> None:
    """Logical ids a property value references (Ref, Fn::GetAtt, Fn::Sub); pseudo parameters excluded."""
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "Ref" and isinstance(v, str) and not v.startswith("AWS::"):
                out.add(v)
            elif k == "Fn::GetAtt":
                out.add(v.split(".", 1)[0] if isinstance(v, str) else v[0])
            elif k == "Fn::Sub":
                text, variables = (v, {}) if isinstance(v, str) else (v[0], v[1])
                for name in _TOKEN.findall(text):
                    base = name.split(".", 1)[0]
                    if base not in variables and not base.startswith("AWS::"):
                        out.add(base)
                _refs(variables, out)
            else:
                _refs(v, out)
    elif isinstance(value, list):
        for v in value:
            _refs(v, out)


def _stable_token(intrinsic: Any) -> str:
    """An intrinsic inside a manifest as `TOKEN_<hash of it>`: the same reference reads the same in two synths, and
    a changed one differs (an object compared across an update sees the change)."""
    return "TOKEN_" + hashlib.sha256(json.dumps(intrinsic, sort_keys=True).encode()).hexdigest()[:12]


def stack_from_template(name: str, template: dict[str, Any], depends_on_stacks: Iterable[str] = ()) -> Stack:
    st = Stack(name, template, tuple(depends_on_stacks))
    resources = st.resources
    for lid, res in resources.items():
        deps: set[str] = set()
        d = res.get("DependsOn", [])
        deps.update([d] if isinstance(d, str) else d)
        _refs(res.get("Properties", {}), deps)
        st._deps[lid] = {x for x in deps if x in resources and x != lid}
        if res.get("Type") == MANIFEST_TYPE:
            props = res.get("Properties", {})
            objs = json.loads(flatten(props["Manifest"], _stable_token))
            st.manifests[lid] = Manifest(name, lid, [o for o in objs if isinstance(o, dict)], props.get("PruneLabel"))
    return st


NESTED_STACK = "AWS::CloudFormation::Stack"


def load_assembly(path: str | Path) -> Assembly:
    """Every CloudFormation stack of a cloud assembly directory (cdk.out), with the stack order cdk deploys in, and
    every nested stack (see nested_templates) as a stack named `<parent>/<logical id of its stack resource>`."""
    root = Path(path)
    manifest = root / "manifest.json"
    if not manifest.is_file():
        raise FileNotFoundError(f"{manifest} not found — pass the output directory of `cdk synth` (cdk.out)")
    artifacts = json.loads(manifest.read_text())["artifacts"]
    stacks: dict[str, Stack] = {}
    for name, art in artifacts.items():
        if art.get("type") != "aws:cloudformation:stack":
            continue
        template = json.loads((root / art["properties"]["templateFile"]).read_text())
        deps = [
            d for d in art.get("dependencies", ()) if artifacts.get(d, {}).get("type") == "aws:cloudformation:stack"
        ]
        display = art.get("displayName", name)
        stacks[display] = stack_from_template(display, template, deps)
    for st in stacks.values():  # dependencies are artifact ids; stacks are keyed by display name
        st.depends_on_stacks = tuple(artifacts[d].get("displayName", d) for d in st.depends_on_stacks)
    for name, template in nested_templates(root, {n: st.template for n, st in stacks.items()}).items():
        stacks[name] = stack_from_template(name, template, (name.rsplit("/", 1)[0],))
    return Assembly(stacks)


def nested_templates(root: str | Path, templates: Mapping[str, dict[str, Any]]) -> dict[str, dict[str, Any]]:
    """The nested stacks of `templates` (name → template) in the cloud assembly directory `root`, recursively: each
    `AWS::CloudFormation::Stack` resource's TemplateURL ends in the S3 object key of a file asset, whose source is the
    nested template file (the assets manifests `*.assets.json`, cdk-assets' format). Named
    `<parent>/<logical id>`: CloudFormation updates a nested stack in place while its resource keeps its logical id
    in the parent, and deletes it (with everything in it) when the logical id leaves."""
    base = Path(root)
    sources: dict[str, Path] = {}
    for assets in base.glob("*.assets.json"):
        for asset in json.loads(assets.read_text()).get("files", {}).values():
            path = asset.get("source", {}).get("path")
            for dest in asset.get("destinations", {}).values():
                if path and dest.get("objectKey"):
                    sources[str(dest["objectKey"])] = base / path
    out: dict[str, dict[str, Any]] = {}
    todo = list(templates.items())
    while todo:
        parent, template = todo.pop()
        for lid, res in template.get("Resources", {}).items():
            if res.get("Type") != NESTED_STACK:
                continue
            url = flatten(res.get("Properties", {}).get("TemplateURL", ""), lambda _: "")
            source = sources.get(url.rsplit("/", 1)[-1])
            if source is None or not source.is_file():
                continue  # a nested stack from outside the assembly (a template URL of its own): not rehearsed
            nested = json.loads(source.read_text())
            out[f"{parent}/{lid}"] = nested
            todo.append((f"{parent}/{lid}", nested))
    return out


def assembly_from_templates(
    templates: Mapping[str, dict[str, Any]], stack_deps: Mapping[str, Iterable[str]] | None = None
) -> Assembly:
    deps = stack_deps or {}
    return Assembly({n: stack_from_template(n, t, deps.get(n, ())) for n, t in templates.items()})


# ------------------------------------------------------------------------------------- what resources provide


def _resource_provides(res: dict[str, Any]) -> list[Need]:
    props = res.get("Properties", {})
    t = res.get("Type")
    if t == HELM_CHART:
        out = []
        if str(props.get("CreateNamespace", "")).lower() == "true" and isinstance(props.get("Namespace"), str):
            out.append(Need("namespace", props["Namespace"]))
        if str(props.get("SkipCrds", "")).lower() != "true":
            out += [Need("crd", g) for g in CHART_CRD_GROUPS.get(str(props.get("Chart", "")), ())]
        return out
    if t == POD_IDENTITY and isinstance(props.get("Namespace"), str) and isinstance(props.get("ServiceAccount"), str):
        return [Need("podidentity", f"{props['Namespace']}/{props['ServiceAccount']}")]
    if t == ADDON and props.get("AddonName") in ADDON_CSI_DRIVERS:
        return [Need("csi", ADDON_CSI_DRIVERS[props["AddonName"]])]
    return []


# ---------------------------------------------------------------------------------------------- create order


@dataclass
class _Provider:
    stack: str
    logical_id: str
    position: int | None  # index in the manifest for an object; None for a whole resource


def _providers(asm: Assembly) -> dict[Need, list[_Provider]]:
    out: dict[Need, list[_Provider]] = {}
    for st in asm.stacks.values():
        for lid, res in st.resources.items():
            for n in _resource_provides(res):
                out.setdefault(n, []).append(_Provider(st.name, lid, None))
        for m in st.manifests.values():
            for i, obj in enumerate(m.objects):
                for n in provides(obj):
                    out.setdefault(n, []).append(_Provider(st.name, m.logical_id, i))
    return out


_MISSING_IS_PROBLEM = frozenset({"namespace", "crd", "serviceaccount", "configmap", "secret"})


def create_order(
    asm: Assembly, *, assume: Iterable[Need] = (), existing: Callable[[Need], bool] | None = None
) -> list[Finding]:
    """Objects whose prerequisites may not exist yet when their manifest is applied, in some allowed order.
    `assume`: prerequisites that exist outside the assembly (e.g. a namespace made by hand). `existing(need)`: for an
    update, what the deployed stack already has. A Pod Identity association or CSI driver add-on that the assembly
    does not create at all is not a problem (the pod may use none; the driver may be installed already)."""
    assumed = set(assume)
    providers = _providers(asm)
    problems: list[Finding] = []
    for st in asm.stacks.values():
        before_stacks = asm.stack_ancestors(st.name)
        for m in st.manifests.values():
            ancestors = st.ancestors(m.logical_id)
            for i, obj in enumerate(m.objects):
                for n in needs(obj):
                    if (
                        (n.kind == "namespace" and n.name in BUILTIN_NAMESPACES)
                        or n.kind == "crd"
                        and n.name in BUILTIN_GROUPS
                    ):
                        continue
                    if n in assumed or (existing is not None and existing(n)):
                        continue
                    cands = providers.get(n, [])
                    if not cands:
                        if n.kind in _MISSING_IS_PROBLEM:
                            problems.append(
                                Finding(
                                    "missing",
                                    m.where,
                                    f"{_describe(obj)} needs {n.kind} {n.name!r}, which nothing in the assembly creates",
                                )
                            )
                        continue

                    if not any(
                        _first(p, asm_stacks=before_stacks, manifest=m, position=i, need=n, ancestors=ancestors)
                        for p in cands
                    ):
                        where = ", ".join(sorted({f"{p.stack}/{p.logical_id}" for p in cands}))
                        problems.append(
                            Finding(
                                "create-order",
                                m.where,
                                f"{_describe(obj)} needs {n.kind} {n.name!r} from {where}, "
                                f"which may be applied after it (no dependency between them)",
                            )
                        )
    return problems


def _first(
    p: _Provider, *, asm_stacks: set[str], manifest: Manifest, position: int, need: Need, ancestors: frozenset[str]
) -> bool:
    """Whether provider `p` exists before the object at `position` of `manifest` in every allowed order."""
    if p.stack in asm_stacks:
        return True
    if p.stack != manifest.stack:
        return False
    if p.logical_id == manifest.logical_id:  # the same kubectl apply: file order, but never a CRD (kubectl#1117)
        return p.position is not None and p.position < position and need.kind != "crd"
    return p.logical_id in ancestors


def _describe(obj: dict[str, Any]) -> str:
    meta = obj.get("metadata", {})
    ns = meta.get("namespace")
    return f"{obj.get('kind')}/{meta.get('name')}" + (f" (namespace {ns})" if ns else "")


# ----------------------------------------------------------------------------------------------------- delete

# Objects whose deletion waits on a finalizer that a chart's controller clears, by (API group, kind) → chart. On stack
# delete CloudFormation deletes in reverse dependency order, so the manifest holding such an object must depend on
# that chart: else the controller may be uninstalled first, the handler's `kubectl delete -f` (which waits for
# finalizers) hangs until the Lambda times out, and — for Karpenter — the nodes it launched are never terminated.
# Sources: Karpenter's finalizers karpenter.sh/termination (NodePool, NodeClaim) and karpenter.k8s.aws/termination
# (EC2NodeClass), which its controller removes after draining and terminating the nodes (Karpenter troubleshooting
# docs: nodes stuck on the finalizer once the controller is gone); KEDA controllers/keda/scaledobject_finalizer.go
# (scaledObjectFinalizer = "finalizer.keda.sh").
CONTROLLER_FINALIZERS: Mapping[tuple[str, str], str] = {
    ("karpenter.sh", "NodePool"): "karpenter",
    ("karpenter.sh", "NodeClaim"): "karpenter",
    ("karpenter.k8s.aws", "EC2NodeClass"): "karpenter",
    ("keda.sh", "ScaledObject"): "keda",
    ("keda.sh", "ScaledJob"): "keda",
}


def delete_order(asm: Assembly) -> list[Finding]:
    """Objects whose finalizer's controller (a Helm chart in the assembly) may go before them on stack delete."""
    charts: dict[str, list[tuple[str, str]]] = {}
    for st in asm.stacks.values():
        for lid, res in st.resources.items():
            if res.get("Type") == HELM_CHART:
                charts.setdefault(str(res.get("Properties", {}).get("Chart", "")), []).append((st.name, lid))
    problems: list[Finding] = []
    for st in asm.stacks.values():
        later = asm.stack_ancestors(st.name)  # stacks deleted after this one
        for m in st.manifests.values():
            ancestors = st.ancestors(m.logical_id)
            for o in m.objects:
                chart = CONTROLLER_FINALIZERS.get((api_group(o), str(o.get("kind"))))
                homes = charts.get(chart or "", [])
                if chart is None or not homes:
                    continue
                if not any(s in later or (s == st.name and lid in ancestors) for s, lid in homes):
                    problems.append(
                        Finding(
                            "delete-order",
                            m.where,
                            f"{_describe(o)} carries a finalizer the {chart} chart's controller "
                            f"clears, but nothing makes CloudFormation delete it before that chart",
                        )
                    )
    return problems


# ---------------------------------------------------------------------------------------------------- update


@dataclass
class ObjectChange:
    key: str
    action: str  # create | change | delete
    manifest: str  # where (stack/logical id) the object is (after) or was (before)


@dataclass
class Plan:
    """objects: Kubernetes objects created/changed/deleted. replaced: AWS resources replaced or removed ("stack/logical
    id (type): why"). hazards: what breaks the update, its rollback, or deletes what the new template still declares.
    leftovers: objects the update stops declaring but nothing deletes (inert; `delete_commands` removes them)."""

    objects: list[ObjectChange]
    replaced: list[str]
    hazards: list[Finding]
    leftovers: list[dict[str, Any]] = field(default_factory=list)
    updated: list[str] = field(default_factory=list)  # AWS resources updated in place: "stack/logical id (type)"

    def delete_commands(self) -> list[str]:
        return [
            f"kubectl delete {o.get('kind', '').lower()}{'.' + api_group(o) if api_group(o) else ''} {o['metadata']['name']}"
            + (f" -n {o['metadata']['namespace']}" if o["metadata"].get("namespace") else "")
            for o in self.leftovers
        ]

    def text(self) -> str:
        lines = []
        for action in ("create", "change", "delete"):
            items = [c for c in self.objects if c.action == action]
            lines.append(f"Kubernetes objects to {action}: {len(items)}")
            lines += [f"  {c.key}  ({c.manifest})" for c in items]
        lines.append(f"AWS resources updated in place: {len(self.updated)}")
        lines += [f"  {r}" for r in self.updated]
        lines.append(f"AWS resources replaced or removed: {len(self.replaced)}")
        lines += [f"  {r}" for r in self.replaced]
        lines.append(f"left in the cluster (not on kubectl's prune allowlist; inert): {len(self.leftovers)}")
        lines += [f"  {c}" for c in self.delete_commands()]
        lines.append(f"hazards: {len(self.hazards)}")
        lines += [f"  {h}" for h in self.hazards]
        return "\n".join(lines)


def _declared(asm: Assembly) -> dict[str, tuple[Manifest, dict[str, Any]]]:
    out: dict[str, tuple[Manifest, dict[str, Any]]] = {}
    for st in asm.stacks.values():
        for m in st.manifests.values():
            for o in m.objects:
                out[object_key(o)] = (m, o)
    return out


def _at(obj: Any, path: str) -> Any:
    for part in path.split("."):
        if not isinstance(obj, dict):
            return None
        obj = obj.get(part)
    return obj


CreateOnly = Callable[[str], tuple[str, ...]]


@functools.cache
def _provider_schema(resource_type: str) -> dict[str, Any] | None:
    """The CloudFormation resource provider schema cfn-lint bundles (the registry's own) for a type; None for a custom
    resource or a type cfn-lint does not know (third-party, brand-new): no replacement facts."""
    try:
        from cfnlint.schema import PROVIDER_SCHEMA_MANAGER, ResourceNotFoundError
    except ImportError as exc:  # pragma: no cover - the dev/plan extra provides it
        raise RuntimeError(
            "the update check needs cfn-lint's CloudFormation resource schemas: pip install 'cdk-cpu-inference[plan]'"
        ) from exc
    if resource_type.startswith("Custom::") or resource_type == "AWS::CloudFormation::CustomResource":
        return None
    try:
        return dict(PROVIDER_SCHEMA_MANAGER.get_resource_schema("us-east-1", resource_type).schema)
    except ResourceNotFoundError:
        return None


def _top(paths: Iterable[str]) -> tuple[str, ...]:
    return tuple(p.split("/")[2] for p in paths if p.startswith("/properties/"))


@functools.cache  # a plan asks once per resource; the schema lookup costs ~1.5 ms
def cfn_create_only(resource_type: str) -> tuple[str, ...]:
    """The createOnlyProperties (top-level names) of a resource type, from the CloudFormation resource provider
    schemas cfn-lint bundles (the registry's own schemas)."""
    schema = _provider_schema(resource_type)
    return _top(schema.get("createOnlyProperties", [])) if schema else ()


@functools.cache
def cfn_fixed_name(resource_type: str) -> tuple[str, ...]:
    """The properties that, when the template sets them, name a resource of this type: its replacement under the same
    values fails ("You can't perform an update that causes a custom-named resource to be replaced. If you must
    replace the resource, specify a new name." — CloudFormation template reference, "resource custom naming",
    https://docs.aws.amazon.com/AWSCloudFormation/latest/TemplateReference/aws-properties-name.html), because
    CloudFormation creates the replacement before it deletes the old one (user guide, "Update behaviors of stack
    resources"). From the registry schema: the primaryIdentifier when the template writes it (BucketName;
    EKS add-on ClusterName + AddonName), else the createOnly `<Type>Name` (SageMaker ModelName, EndpointConfigName:
    their identifier is the generated ARN). () for a type whose schema says replacementStrategy delete_then_create
    (the old one goes first: cloudformation-cli resource type schema, replacementStrategy)."""
    schema = _provider_schema(resource_type)
    if not schema or schema.get("replacementStrategy") == "delete_then_create":
        return ()
    create_only = set(schema.get("createOnlyProperties", []))
    ident = schema.get("primaryIdentifier", [])
    if ident and all(p in create_only and p not in schema.get("readOnlyProperties", []) for p in ident):
        return _top(ident)
    name = f"/properties/{resource_type.rsplit('::', 1)[-1]}Name"
    return _top([name]) if name in create_only else ()


# A custom resource type → how to tell whether its rollback Update (new → old properties) is a no-op. Returns None
# when it is, else why not. The kubectl handler's Update re-applies the old manifest: that restores, not a hazard.
RollbackProbe = Callable[[dict[str, Any], dict[str, Any]], str | None]


class _Refuse:
    """An AWS client stand-in that fails on any call: a rollback probe's handler must make none."""

    def __init__(self, service: str) -> None:
        self.service = service

    def __getattr__(self, name: str) -> Any:
        raise _Called(f"{self.service}.{name}")


class _Called(Exception):
    pass


def model_copy_rollback(new: dict[str, Any], old: dict[str, Any]) -> str | None:
    """Runs this library's own model-copy handler (model_download.custom_resource: Custom::ModelArtifact, its
    snapshot form, Custom::ModelCatalog) on the rollback of an update from `old` to `new` properties, in both cases
    CloudFormation produces: this resource's own update failed (its PhysicalResourceId still holds the deployed
    receipt), or it succeeded and a later resource failed (the id holds the new receipt and the previous one).
    CodeBuild and CloudWatch Logs refuse every call. None when the rollback Update and its isComplete answer from
    the id alone; else what they tried."""
    from model_download import catalog_resource, custom_resource, snapshot_resource
    from model_download.build_job import Deployed, physical_id

    module = catalog_resource if "CatalogKey" in old else snapshot_resource if "Snapshot" in old else custom_resource
    receipts = module.RECEIPTS

    def deployed_id(*props: dict[str, Any]) -> str:
        stored = {k: "0" for k in receipts.stored}
        entries = [Deployed(receipts.digest(p), stored) for p in props]
        return physical_id(receipts.location(props[0], receipts.attributes(props[0], stored)), *entries)

    for case, pid in (
        ("after its own update failed", deployed_id(old)),
        ("after a later resource failed", deployed_id(new, old)),
    ):
        event = {
            "RequestType": "Update",
            "ResourceProperties": old,
            "OldResourceProperties": new,
            "PhysicalResourceId": pid,
            "RequestId": "rehearsal",
            "LogicalResourceId": "Copy",
            "StackId": "rehearsal",
        }
        try:
            with contextlib.redirect_stdout(io.StringIO()):  # the handler logs for CloudWatch; not the plan's output
                answer = custom_resource.on_event(event, codebuild=_Refuse("codebuild"))
                done = custom_resource.is_complete(
                    {**event, **answer}, codebuild=_Refuse("codebuild"), logs=_Refuse("logs")
                )
        except _Called as exc:
            return f"calls {exc} ({case}): it re-runs the copy instead of restoring the deployed receipt"
        if not done.get("IsComplete"):
            return f"waits for a build ({case})"
    return None


# The custom resources whose rollback this library can rehearse by running their handler.
ROLLBACK_PROBES: Mapping[str, RollbackProbe] = {
    "Custom::ModelArtifact": model_copy_rollback,
    "Custom::ModelCatalog": model_copy_rollback,
}


def _stateful_replaced(where: str, res: dict[str, Any], why: str) -> list[Finding]:
    t = str(res.get("Type", ""))
    if t not in STATEFUL_TYPES:
        return []
    kept = res.get("UpdateReplacePolicy") in {"Retain", "Snapshot"}
    return [
        Finding(
            "stateful-replaced",
            where,
            f"{t} is replaced ({why}): a new empty resource; the old one is "
            + ("retained, orphaned" if kept else "deleted with its data"),
        )
    ]


def _ref_set(value: Any) -> set[str]:
    out: set[str] = set()
    _refs(value, out)
    return out


def _attr_set(value: Any) -> set[str]:
    """Logical ids whose ATTRIBUTES a property value reads (Fn::GetAtt, `${X.Attr}` in Fn::Sub) — not a plain Ref."""
    out: set[str] = set()
    if isinstance(value, dict):
        for k, v in value.items():
            if k == "Fn::GetAtt":
                out.add(v.split(".", 1)[0] if isinstance(v, str) else v[0])
            elif k == "Fn::Sub":
                text, variables = (v, {}) if isinstance(v, str) else (v[0], v[1])
                out |= {
                    n.split(".", 1)[0] for n in _TOKEN.findall(text) if "." in n and n.split(".", 1)[0] not in variables
                }
                out |= _attr_set(variables)
            else:
                out |= _attr_set(v)
    elif isinstance(value, list):
        for v in value:
            out |= _attr_set(v)
    return out


# A custom resource's attributes are whatever its handler returns as Data, so an update in place may change every
# Fn::GetAtt of it (e.g. an image build's digest): CloudFormation then updates what reads them, replacing it where
# the property is createOnly ("Custom resources", user guide: Data "can be accessed by Fn::GetAtt").
def _is_custom(resource_type: str) -> bool:
    return resource_type.startswith("Custom::") or resource_type == "AWS::CloudFormation::CustomResource"


@dataclass
class _Cascade:
    """What the replacement of resources does to what references them: `replaced` and `updated` (where → why), and
    per stack the names whose value changes (replaced logical ids, nested-stack parameters set from them)."""

    replaced: dict[str, str]
    updated: dict[str, str]
    changing: dict[str, set[str]]


def _cascade(
    before: Assembly,
    after: Assembly,
    seeds: Mapping[str, set[str]],
    create_only: CreateOnly,
    outputs: Mapping[str, set[str]] | None = None,
) -> _Cascade:
    """CloudFormation re-resolves every Ref / Fn::GetAtt / Fn::Sub of a replaced resource to the replacement's values
    ("Replacement … generates a new physical ID … changes references from other dependent resources to point to the
    replacement resource" — user guide, "Update behaviors of stack resources",
    https://docs.aws.amazon.com/AWSCloudFormation/latest/UserGuide/using-cfn-updating-stacks-update-behaviors.html).
    Any Ref or attribute of a replaced resource counts as changed: the few that would not (a fixed name Ref'd on a
    type that takes one) collide anyway (cfn_fixed_name). A referrer whose referencing property is createOnly is
    replaced in turn, and so on along the chain; one whose referencing properties are all mutable is updated in
    place (its own physical id, hence its Ref, keeps: the chain stops there), even when its template text did not
    change. A nested stack's parameter set from a changing value changes inside the nested stack. `outputs`: per
    stack the custom resources updated in place (_is_custom), whose Fn::GetAtt values may change (not their Ref)."""
    changing = {name: set(ids) for name, ids in seeds.items()}
    new_data = {name: set(ids) for name, ids in (outputs or {}).items()}
    replaced: dict[str, str] = {}
    updated: dict[str, str] = {}

    def describe(stack: str, ident: str) -> str:
        res = after.stacks[stack].resources.get(ident)
        if res is None:
            return f"parameter {stack}/{ident}, which the parent stack sets from a replaced resource"
        if ident not in changing.get(stack, set()):
            return f"an attribute of {stack}/{ident} ({res.get('Type')}), which is updated and may return new values"
        return f"{stack}/{ident} ({res.get('Type')}), which is replaced"

    grew = True
    while grew:
        grew = False
        for name, st in after.stacks.items():
            old_st = before.stacks.get(name)
            if old_st is None:
                continue
            ids = changing.setdefault(name, set())
            parent, _, stack_lid = name.rpartition("/")
            if parent in after.stacks and parent in before.stacks:  # a nested stack: its parameters
                holder = after.stacks[parent].resources.get(stack_lid, {})
                for param, value in holder.get("Properties", {}).get("Parameters", {}).items():
                    if param not in ids and _ref_set(value) & changing.get(parent, set()):
                        ids.add(param)
                        grew = True
            attrs = new_data.get(name, set()) - ids
            if not ids and not attrs:
                continue
            for lid, res in st.resources.items():
                old = old_st.resources.get(lid)
                if lid in ids or old is None or old.get("Type") != res.get("Type"):
                    continue  # replaced already, new (created with the new values), or a type change (replaced)
                hits = {
                    k: sorted(_ref_set(v) & ids) + sorted(_attr_set(v) & attrs)
                    for k, v in res.get("Properties", {}).items()
                }
                hits = {k: v for k, v in hits.items() if v}
                if not hits:
                    continue
                key = f"{name}/{lid}"
                create_only_hits = [k for k in create_only(str(res.get("Type", ""))) if k in hits]
                prop = (create_only_hits or sorted(hits))[0]
                why = f"{prop} references {describe(name, hits[prop][0])}"
                if create_only_hits:
                    replaced[key] = why
                    updated.pop(key, None)
                    ids.add(lid)
                    grew = True
                else:
                    updated[key] = why
    return _Cascade(replaced, updated, changing)


def plan(
    before: Assembly,
    after: Assembly,
    *,
    create_only: CreateOnly = cfn_create_only,
    fixed_name: CreateOnly = cfn_fixed_name,
    rollback_probes: Mapping[str, RollbackProbe] = ROLLBACK_PROBES,
    assume: Iterable[Need] = (),
) -> Plan:
    """What an update from `before` to `after` does, and its hazards (see the module docstring)."""
    hazards: list[Finding] = []
    replaced: list[str] = []
    leftovers: list[dict[str, Any]] = []
    updated: list[str] = []
    seeds: dict[str, set[str]] = {}  # per stack: the logical ids replaced by their own change (or a type change)
    outputs: dict[str, set[str]] = {}  # per stack: custom resources updated in place (their attributes may change)
    old_objs, new_objs = _declared(before), _declared(after)

    changes: list[ObjectChange] = []
    for k, (m, o) in new_objs.items():
        if k not in old_objs:
            changes.append(ObjectChange(k, "create", m.where))
        elif old_objs[k][1] != o:
            changes.append(ObjectChange(k, "change", m.where))
    changes += [ObjectChange(k, "delete", m.where) for k, (m, _) in old_objs.items() if k not in new_objs]

    for name, old_st in before.stacks.items():
        new_st = after.stacks.get(name)
        new_res = new_st.resources if new_st is not None else {}
        new_manifests = new_st.manifests if new_st is not None else {}
        added_types = {r.get("Type") for lid, r in new_res.items() if lid not in old_st.resources}
        for lid, res in old_st.resources.items():
            where = f"{name}/{lid}"
            t = res.get("Type", "")
            nr = new_res.get(lid)
            if nr is None or nr.get("Type") != t:
                if nr is not None:  # the same logical id, another type: a new resource under it
                    seeds.setdefault(name, set()).add(lid)
                retained = res.get("DeletionPolicy") in {"Retain", "RetainExceptOnCreate"}
                replaced.append(f"{where} ({t}): removed" + (" (retained, orphaned)" if retained else ""))
                # Removing what the user removed is the point of the update; a stateful resource that leaves while
                # one of its type arrives under a new logical id is a rename: the new one starts empty.
                if t in STATEFUL_TYPES and t in added_types:
                    hazards.append(
                        Finding(
                            "stateful-renamed",
                            where,
                            f"{t} leaves the template while a new {t} arrives: "
                            + (
                                "the old one is retained and orphaned"
                                if retained
                                else "the old one is deleted with its data"
                            )
                            + ", the new one starts empty",
                        )
                    )
            else:
                old_props, new_props = res.get("Properties", {}), nr.get("Properties", {})
                changed = [p for p in create_only(t) if old_props.get(p) != new_props.get(p)]
                if not changed and old_props != new_props:
                    updated.append(f"{where} ({t})")
                    if _is_custom(t):
                        outputs.setdefault(name, set()).add(lid)
                if changed:
                    replaced.append(f"{where} ({t}): replaced ({', '.join(changed)} changed)")
                    seeds.setdefault(name, set()).add(lid)
                    hazards += _stateful_replaced(where, res, f"{', '.join(changed)} changed")
                if t in rollback_probes and old_props != new_props:
                    why = rollback_probes[t](new_props, old_props)
                    if why:
                        hazards.append(
                            Finding(
                                "rollback-not-noop", where, f"if this update fails, the rollback Update of {t} {why}"
                            )
                        )

        # A resource created under a new logical id while the old one (same type, same createOnly identity, e.g. an
        # EKS add-on's ClusterName + AddonName) still exists: CloudFormation creates the new one first and deletes the
        # old one only in cleanup, so the create fails ("already exists", e.g. CreateAddon ResourceInUseException).
        removed = {lid: r for lid, r in old_st.resources.items() if lid not in new_res}
        for lid, r in new_res.items():
            if lid in old_st.resources:
                continue
            keys = create_only(str(r.get("Type", "")))
            ident = {k: r.get("Properties", {}).get(k) for k in keys}
            if all(v is None for v in ident.values()):
                continue  # a generated name (e.g. no BucketName) cannot collide
            for olid, o in removed.items():
                if o.get("Type") == r.get("Type") and all(
                    o.get("Properties", {}).get(k) == v for k, v in ident.items()
                ):
                    hazards.append(
                        Finding(
                            "identity-collision",
                            f"{name}/{lid}",
                            f"{r.get('Type')} with the same {', '.join(keys)} "
                            f"as {name}/{olid}, which is deleted only after this one is created: the create fails",
                        )
                    )

        # Removed manifest resources: CloudFormation deletes them in cleanup, after the new template applied;
        # the handler runs `kubectl delete -f` on their objects.
        for lid, m in old_st.manifests.items():
            if lid in new_manifests:
                continue
            for o in m.objects:
                k = object_key(o)
                if k in new_objs:
                    hazards.append(
                        Finding(
                            "deleted-while-declared",
                            m.where,
                            f"{_describe(o)} moves to {new_objs[k][0].where}; CloudFormation's cleanup deletes this "
                            f"resource after the update and its `kubectl delete -f` deletes the object the new template declares",
                        )
                    )
        # Updated manifests: objects leaving a manifest that survives are pruned only if on the allowlist.
        for lid, m in old_st.manifests.items():
            nm = new_manifests.get(lid)
            if nm is None:
                continue
            staying = {object_key(o) for o in nm.objects}
            for o in m.objects:
                k = object_key(o)
                if k in staying:
                    continue
                if k in new_objs:
                    if is_pruned(o) and m.prune_label:
                        hazards.append(
                            Finding(
                                "pruned-while-declared",
                                m.where,
                                f"{_describe(o)} moves to {new_objs[k][0].where}; this resource's `apply --prune` may delete it "
                                f"after the other applied it (no order between the two updates)",
                            )
                        )
                elif not (is_pruned(o) and m.prune_label):
                    leftovers.append(o)
        # New manifest resources: a failed update's rollback deletes them → `kubectl delete -f` of objects the old
        # template still declares.
        for lid, nm in new_manifests.items():
            if lid in old_st.manifests:
                continue
            for o in nm.objects:
                k = object_key(o)
                if k in old_objs and old_objs[k][0].logical_id != lid:
                    hazards.append(
                        Finding(
                            "rollback-deletes",
                            nm.where,
                            f"{_describe(o)} is already deployed by {old_objs[k][0].where}; if the update fails, "
                            "the rollback deletes this new resource and its `kubectl delete -f` deletes the object",
                        )
                    )

    # What references a replaced resource: replaced in turn through a createOnly property, else updated in place.
    cascade = _cascade(before, after, seeds, create_only, outputs)
    for where, why in cascade.replaced.items():
        stack, lid = where.rsplit("/", 1)
        res = after.stacks[stack].resources[lid]
        entry = f"{where} ({res.get('Type')})"
        updated = [u for u in updated if u != entry]
        replaced.append(f"{entry}: replaced ({why})")
        hazards += _stateful_replaced(where, before.stacks[stack].resources[lid], why)
    for where, why in cascade.updated.items():
        stack, lid = where.rsplit("/", 1)
        entry = f"{where} ({after.stacks[stack].resources[lid].get('Type')})"
        updated = [u for u in updated if u != entry] + [f"{entry}: updated in place ({why})"]
    # A replaced resource the template names: its replacement is created under the same name before the old one
    # is deleted, and the create fails (cfn_fixed_name). A name built from a changing value is a new name.
    for stack, ids in cascade.changing.items():
        old_res, now_res = before.stacks[stack].resources, after.stacks[stack].resources
        for lid in sorted(ids):
            old, new = old_res.get(lid), now_res.get(lid)
            if old is None or new is None or old.get("Type") != new.get("Type"):
                continue  # a parameter, or a type change (another kind of resource, another namespace of names)
            t = str(new.get("Type", ""))
            old_props, new_props = old.get("Properties", {}), new.get("Properties", {})
            keys = fixed_name(t)
            if keys and all(
                new_props.get(k) is not None
                and new_props.get(k) == old_props.get(k)
                and not _ref_set(new_props[k]) & ids
                for k in keys
            ):
                named = ", ".join(f"{k} {new_props[k]!r}" for k in keys)
                hazards.append(
                    Finding(
                        "identity-collision",
                        f"{stack}/{lid}",
                        f"{t} is replaced under the same {named}: CloudFormation creates the replacement before it "
                        "deletes the old one, so the create fails — give it a new name with this change, or drop the "
                        "name and let CloudFormation generate one",
                    )
                )

    # Immutable fields on objects that keep their identity.
    for k, (m, o) in new_objs.items():
        if k not in old_objs:
            continue
        old = old_objs[k][1]
        for path in IMMUTABLE_FIELDS.get((api_group(o), str(o.get("kind"))), ()):
            if _at(old, path) != _at(o, path):
                hazards.append(
                    Finding(
                        "immutable-field",
                        m.where,
                        f"{_describe(o)}: {path} changes, which the API server refuses "
                        "on update (kubectl apply fails, the stack rolls back)",
                    )
                )

    # New prerequisites must come first too (what the deployed stack already has exists).
    had = _providers(before)
    for f in create_order(after, assume=assume, existing=lambda n: n in had):
        hazards.append(f)
    return Plan(changes, replaced, hazards, leftovers, updated)
