"""InferenceWorkloads: the served models (and optionally the router) of one pattern on an InferenceCluster.

For every model: a LlamaServerChart (cdk8s) rendered into bounded KubernetesManifests, an IAM role that
EKS Pod Identity gives the model's service account — allowed to read only that model's S3 prefix (the
init container downloads the model with it) — and a queue-depth KEDA ScaledObject. Plus the pattern's
namespace (Pod Security "restricted"), the router chart, and, with Amazon Managed Prometheus, a rule
groups namespace with the field-notes alerts (monitoring/alerts.py) and a Grafana dashboard ConfigMap.

Order: namespace → Pod Identity associations + model copies (ModelArtifact.resource) → workloads →
ScaledObjects (after KEDA's chart, which brings the CRDs). Associations come before the pods because the
Pod Identity webhook injects credentials only into pods created after them.
"""

from __future__ import annotations

import json
import re
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from typing import Any

import aws_cdk as cdk
import cdk8s
from aws_cdk import aws_aps as aps
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct, IDependable

from cpu_inference import engines, sizing
from cpu_inference.artifacts.model_artifact import ModelArtifact
from cpu_inference.artifacts.model_bucket import ModelBucket
from cpu_inference.eks.inference_cluster import InferenceCluster
from cpu_inference.eks.keda import Keda
from cpu_inference.eks.manifests import add_bounded_manifests, object_key
from cpu_inference.eks.metrics import Metrics
from cpu_inference.eks.mountpoint import MountpointS3Csi
from cpu_inference.k8s.charts.llama_server_chart import LlamaServerChart, LlamaServerChartProps
from cpu_inference.k8s.charts.model_pool_chart import ModelPoolChart, ModelPoolChartProps, pool_object_name
from cpu_inference.k8s.charts.namespace_chart import ServingNamespaceChart, ServingNamespaceProps
from cpu_inference.k8s.charts.router_chart import (
    RouterChart,
    RouterChartProps,
    gateway_cold_start_query,
    gateway_models,
)
from cpu_inference.k8s.workloads.model_fetch import adapter_path
from cpu_inference.k8s.workloads.model_workload import ModelWorkload
from cpu_inference.k8s.workloads.serving_policy import KedaSource, ServingPolicy
from cpu_inference.monitoring.alerts import ModelAlertSpec, dashboard, rule_groups_yaml
from slm_router.config import GatewayAdapter

POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
# The ServiceAccount every shared_identity model of a namespace runs as (one per namespace; ModelDeployment).
SHARED_SERVICE_ACCOUNT = "dedicated-models"
# The gateway's wait for a pooled model's response head, a cold load on its replica included (slm_router.config
# Gateway.cold_load_timeout_s), and its per-replica health probe period: the contract's defaults.
COLD_LOAD_TIMEOUT_S = 60
HEALTH_INTERVAL_S = 5
_identity = id  # the builtin (InferenceWorkloads.__init__ shadows `id` with the construct id)
# The escape hatch's type: gets one rendered Kubernetes object (a dict); changes it in place and returns None, or
# returns the object to use instead.
KubernetesPatch = Callable[[dict[str, Any]], dict[str, Any] | None]


@dataclass(frozen=True)
class ModelDeployment:
    """One model to deploy: the workload (k8s/llama_server_chart.ModelWorkload, llama.cpp or vLLM) and where its
    bytes are.

    artifact: a ModelArtifact — the role may read its objects (`models/<name>/`) and the pods
    start after its copy. Or model_bucket + read_prefix (a key prefix of the GGUF, or of a vLLM snapshot, in that
    bucket), or an existing_role that already grants the read (bring-your-own IAM).
    baseline_tokens_per_second: decode tok/s per sequence for the throughput alert (None: self-calibrating).
    shared_identity (with model_bucket + read_prefix): the pods run as the namespace's ONE shared ServiceAccount
    (SHARED_SERVICE_ACCOUNT), whose one IAM role and one Pod Identity association read every shared model's
    read_prefix — O(1) resources whatever the number of models (a farm's dedicated models read `farm/`, the prefix
    its pools already read: one trust domain). ready: what the pods wait for besides (a farm's wait for its
    dedicated models' catalog keys).
    """

    workload: ModelWorkload
    artifact: ModelArtifact | None = None
    model_bucket: ModelBucket | None = None
    read_prefix: str | None = None
    existing_role: iam.IRole | None = None
    baseline_tokens_per_second: float | None = None
    shared_identity: bool = False
    ready: IDependable | None = None

    @classmethod
    def from_artifact(
        cls, artifact: ModelArtifact, *, image: str, spec: sizing.ModelSpec, **workload: Any
    ) -> ModelDeployment:
        """Name, S3 URI and sha256 from the artifact's copy (the commit-pinned key and the digest it verified:
        every pod fetches and checks the same bytes; for a vLLM snapshot artifact, its commit-pinned prefix and its
        manifest's digest); the rest of ModelWorkload as keywords."""
        if engines.is_vllm(spec.engine) != artifact.is_snapshot:
            raise ValueError(
                f"ModelDeployment.from_artifact {artifact.props.name!r}: engine {spec.engine} needs "
                + (
                    "a snapshot artifact (ModelArtifactProps(snapshot=True), the repo's safetensors)"
                    if engines.is_vllm(spec.engine)
                    else "a GGUF file artifact (ModelArtifactProps(file=...)); a snapshot is for engine vllm"
                )
            )
        baseline = workload.pop("baseline_tokens_per_second", None)
        workload.setdefault("sha256", artifact.sha256)
        return cls(
            workload=ModelWorkload(
                name=artifact.props.name, image=image, model_uri=artifact.s3_uri, spec=spec, **workload
            ),
            artifact=artifact,
            baseline_tokens_per_second=baseline,
        )

    def validate(self) -> None:
        if self.shared_identity and (self.model_bucket is None or not self.read_prefix):
            raise ValueError(
                f"ModelDeployment {self.workload.name!r}: shared_identity reads through model_bucket + read_prefix; give both"
            )
        sources = [x for x in (self.artifact, self.model_bucket, self.existing_role) if x is not None]
        if len(sources) != 1:
            raise ValueError(
                f"ModelDeployment {self.workload.name!r}: give exactly one of artifact, model_bucket (+ read_prefix) or existing_role"
            )
        if self.model_bucket is not None and not self.read_prefix:
            raise ValueError(
                f"ModelDeployment {self.workload.name!r}: model_bucket needs read_prefix (the model's key prefix, e.g. models/<name>/)"
            )


@dataclass(frozen=True)
class InferenceWorkloadsProps:
    """cluster: the InferenceCluster. models: the ModelDeployments (names unique). policy: namespace-wide
    settings (k8s/llama_server_chart.ServingPolicy); the construct fills in what the platform knows when it
    is left unset — KEDA's metrics source (from `metrics` + `keda`), the scraper's allowed sources (AMP
    collector subnets or the in-cluster Prometheus namespace), the bucket region and the Kubernetes minor.
    router: RouterChartProps to deploy the router/gateway in the same namespace; router_policy_statements:
    what its Pod Identity role may do (e.g. sagemaker:InvokeEndpoint on the escalation endpoint).
    p95_latency_slo_ms: adds the router-latency alert (the first-token SLO: the patterns pass config.yaml's
        slo.p95_latency_ms, default config.schema.FIRST_TOKEN_SLO_MS; None: no alert). alerts / dashboard: AMP rule
    groups namespace (AMP only) and the Grafana dashboard ConfigMap (label grafana_dashboard=1). create_namespace:
    render the pattern's namespace (skipped when it is the cluster's own workload namespace).
    depends_on: anything the workloads must wait for (e.g. Karpenter's node pools).
    pools: multi-model pools (k8s/model_pool_chart.ModelPoolChartProps), one StatefulSet each; their policy and
    namespace are this construct's effective policy. With a gateway router, `gateway.pools` (and
    cold_load_timeout_s / health_interval_s) are filled from them unless the config sets them.
    mountpoint: the Mountpoint for S3 CSI add-on (eks/mountpoint.py) the pools' volumes need; the pools wait
    for it. Pools also wait for `depends_on` (pass the ModelCatalog's resource: the files must exist before a
    pod checks its preset).
    kubernetes_patch: the escape hatch for what these props do not model (see README.md beside this file): called
    once with every Kubernetes object this construct renders — namespace, each model's chart, pools, router, the
    dashboard ConfigMap, KEDA ScaledObjects and TriggerAuthentication — as the dict that goes into its
    KubernetesManifest. Change it in place and return None, or return the object to use instead. The charts are
    rendered in the constructor, so this, not editing `charts[...]` afterwards, is how a rendered object changes.
    model_scope: where each model's manifests — its chart's objects and its ScaledObject — live, by model name (e.g.
    a nested stack chosen by a stable hash of the name, patterns/deployment.DedicatedStacks); None: this construct.
    A KubernetesManifest in a nested stack reaches the cluster's kubectl provider by its service token, a parameter
    of the nested stack (aws-cdk-lib aws-eks-v2/lib/kubectl-provider.ts KubectlProvider.getKubectlProvider: the
    cluster's provider, after its kubectl barrier).
    """

    cluster: InferenceCluster
    models: tuple[ModelDeployment, ...] = ()
    policy: ServingPolicy = ServingPolicy()
    metrics: Metrics | None = None
    keda: Keda | None = None
    router: RouterChartProps | None = None
    router_policy_statements: tuple[iam.PolicyStatement, ...] = ()
    p95_latency_slo_ms: int | None = None
    alerts: bool = True
    dashboard: bool = True
    create_namespace: bool = True
    depends_on: tuple[IDependable, ...] = field(default_factory=tuple)
    pools: tuple[ModelPoolChartProps, ...] = ()
    mountpoint: MountpointS3Csi | None = None
    kubernetes_patch: KubernetesPatch | None = None
    model_scope: Callable[[str], Construct] | None = None

    def validate(self) -> None:
        if SHARED_SERVICE_ACCOUNT in {m.workload.name for m in self.models if not m.shared_identity} and any(
            m.shared_identity for m in self.models
        ):
            raise ValueError(
                f"InferenceWorkloadsProps.models: a model named {SHARED_SERVICE_ACCOUNT!r} would own the ServiceAccount "
                "the shared-identity models run as; rename it"
            )
        if not self.models and not self.pools:
            raise ValueError("InferenceWorkloadsProps.models: at least one model (or one pool in pools) is required")
        names = [m.workload.name for m in self.models]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(
                f"InferenceWorkloadsProps.models: names {dup} appear more than once — model names must be unique"
            )
        pool_names = [p.name for p in self.pools]
        dup = sorted({n for n in pool_names if pool_names.count(n) > 1})
        if dup:
            raise ValueError(
                f"InferenceWorkloadsProps.pools: pool names {dup} appear more than once — pool names must be unique"
            )
        clash = sorted({pool_object_name(n) for n in pool_names} & set(names))
        if clash:
            raise ValueError(
                f"InferenceWorkloadsProps: model names {clash} collide with a pool's objects (pool-<name>); rename the model or the pool"
            )
        pooled = [m.name for p in self.pools for m in p.models]
        both = sorted(set(pooled) & set(names) | {n for n in pooled if pooled.count(n) > 1})
        if both:
            raise ValueError(
                f"InferenceWorkloadsProps: models {both[:5]} are served twice (dedicated and pooled, or in two pools); "
                "a model has one home"
            )
        for m in self.models:
            m.validate()
        if self.router is not None:
            if self.router.name in names or self.router.name in {pool_object_name(n) for n in pool_names}:
                raise ValueError(f"InferenceWorkloadsProps.router.name {self.router.name!r} collides with a model name")
            if self.router.namespace != self.policy.namespace:
                raise ValueError(
                    f"InferenceWorkloadsProps.router.namespace {self.router.namespace!r} must equal policy.namespace {self.policy.namespace!r}"
                )
        if self.keda is not None and self.metrics is None and self.policy.keda is None:
            raise ValueError(
                "InferenceWorkloadsProps: keda needs metrics (where KEDA reads llama-server's queue depth) or policy.keda"
            )
        if self.p95_latency_slo_ms is not None and self.p95_latency_slo_ms <= 0:
            raise ValueError("InferenceWorkloadsProps.p95_latency_slo_ms must be > 0")


class InferenceWorkloads(Construct):
    """Attributes: policy (effective ServingPolicy), charts (name → LlamaServerChart), pool_charts (pool name →
    ModelPoolChart), pool_manifests, router_chart,
    roles (name → IRole, models and "router"), pod_identity_associations (name → CfnPodIdentityAssociation),
    namespace_manifests, model_manifests, router_manifests, scaled_object_manifests, rule_groups (AMP
    CfnRuleGroupsNamespace or None), dashboard (dict or None), alert_rules_yaml (str).

    The charts are rendered into the manifests while this constructor runs: to change a rendered object, pass
    `props.kubernetes_patch` (changing `charts[...]` afterwards reaches no manifest)."""

    def __init__(self, scope: Construct, id: str, *, props: InferenceWorkloadsProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        ic = props.cluster
        self.policy = self._effective_policy(props)
        p = self.policy
        app = cdk8s.App()  # rendering only: the objects go into KubernetesManifests below

        self.namespace_manifests: list[eks.KubernetesManifest] = []
        ns_deps: list[IDependable] = []
        if ic.namespace_manifest is not None and ic.props.workload_namespace == p.namespace:
            ns_deps.append(ic.namespace_manifest)
        elif props.create_namespace:
            ns_chart = ServingNamespaceChart(
                app, "Namespace", props=ServingNamespaceProps(p.namespace, p.pattern, p.kubernetes_minor)
            )
            self.namespace_manifests = add_bounded_manifests(
                ic.cluster, "Namespace", self._patched(ns_chart.to_json()), scope=self, depends_on=props.depends_on
            )
            ns_deps += self.namespace_manifests

        self.roles: dict[str, iam.IRole] = {}
        self.pod_identity_associations: dict[str, eks.CfnPodIdentityAssociation] = {}
        self.charts: dict[str, LlamaServerChart] = {}
        model_objs: list[dict[str, Any]] = []
        model_keys: dict[int, str] = {}
        deps: list[IDependable] = [*ns_deps, *props.depends_on]
        gateway = props.router is not None and props.router.mode == "gateway"
        # Shared identity: ONE ServiceAccount, role and Pod Identity association for every shared_identity model.
        shared = [md for md in props.models if md.shared_identity]
        self.identity_manifests: list[eks.KubernetesManifest] = []
        shared_role: iam.Role | None = None
        if shared:
            shared_role = self._shared_role(shared)
            self.roles[SHARED_SERVICE_ACCOUNT] = shared_role
            sa = {
                "apiVersion": "v1",
                "kind": "ServiceAccount",
                "metadata": {
                    "name": SHARED_SERVICE_ACCOUNT,
                    "namespace": p.namespace,
                    "labels": {"app.kubernetes.io/part-of": p.pattern},
                },
                # No API token: Pod Identity injects its own projected token; the pods never call Kubernetes.
                "automountServiceAccountToken": False,
            }
            self.identity_manifests = add_bounded_manifests(
                ic.cluster, "Identity", self._patched([sa]), scope=self, depends_on=[*ns_deps, *props.depends_on]
            )
            deps += [self._associate(SHARED_SERVICE_ACCOUNT, SHARED_SERVICE_ACCOUNT, shared_role)]
            deps += self.identity_manifests
        homes: dict[str, Construct] = {}  # model name → the scope of its manifests, when not this construct
        home_deps: list[IDependable] = []  # what a model's manifests wait for beyond `deps`
        for md in props.models:
            w = md.workload
            if gateway and w.replicas_min == 0 and not w.cold_start_query:
                # Behind the gateway a cold model wakes on the gateway's 503s for it (no pod, no llama metrics).
                w = replace(w, cold_start_query=gateway_cold_start_query(p.namespace, w.name))
            chart = LlamaServerChart(
                app,
                w.name,
                props=LlamaServerChartProps(
                    model=w, policy=p, service_account=SHARED_SERVICE_ACCOUNT if md.shared_identity else None
                ),
            )
            self.charts[w.name] = chart
            if md.shared_identity:
                assert shared_role is not None
                self.roles[w.name] = shared_role
            else:
                role = md.existing_role or self._model_role(md)
                self.roles[w.name] = role
                deps.append(self._associate(w.name, chart.service_account_name, role))
            if md.artifact is not None:
                deps.append(md.artifact.resource)
            if md.ready is not None and md.ready not in home_deps:
                home_deps.append(md.ready)
            if props.model_scope is not None:
                homes[w.name] = props.model_scope(w.name)
            for obj in self._patched(chart.to_json()):
                model_keys[_identity(obj)] = (
                    f"model/{w.name}"  # a model's objects share one manifest, whatever else changes
                )
                model_objs.append(obj)
        deps += home_deps

        self.pool_charts: dict[str, ModelPoolChart] = {}
        pool_objs: list[dict[str, Any]] = []
        pool_keys: dict[int, str] = {}
        for pool in props.pools:
            pool_chart = ModelPoolChart(app, f"pool-{pool.name}", props=replace(pool, policy=p, namespace=None))
            self.pool_charts[pool.name] = pool_chart
            for obj in self._patched(pool_chart.to_json()):
                pool_keys[_identity(obj)] = (
                    f"pool/{pool.name}"  # a pool's objects share one manifest (~100 B per model)
                )
                pool_objs.append(obj)

        self.router_chart: RouterChart | None = None
        router_objs: list[dict[str, Any]] = []
        if props.router is not None:
            self.router_chart = RouterChart(
                app,
                "Router",
                props=self._router_props(props.router, {n: c.service_url for n, c in self.charts.items()}),
            )
            router_objs = self._patched(self.router_chart.to_json())
            if props.router_policy_statements:
                role = iam.Role(
                    self,
                    "RouterRole",
                    assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
                    description=f"Router {props.router.name} in {p.namespace} (EKS Pod Identity): escalation calls",
                )
                for s in props.router_policy_statements:
                    role.add_to_principal_policy(s)
                self.roles[props.router.name] = role
                deps.append(self._associate(props.router.name, props.router.name, role))

        alert_models = [
            ModelAlertSpec(
                name=md.workload.name,
                slots=self.charts[md.workload.name].sizing.slots,
                memory_limit_bytes=self.charts[md.workload.name].memory_limit_bytes,
                replicas_min=md.workload.replicas_min,
                baseline_tokens_per_second=md.baseline_tokens_per_second,
                engine=md.workload.engine,
            )
            for md in props.models
        ]
        router_app = props.router.name if props.router is not None else None
        router_mode = props.router.mode if props.router is not None else "router"
        slo = props.p95_latency_slo_ms / 1000 if props.p95_latency_slo_ms is not None and router_app else None
        # Dedicated models are watched on their engine's metrics; pools have none at the pod (router mode serves
        # /metrics per loaded model only), so they are watched through the gateway's series (monitoring/alerts.py).
        alert_pools = [pool.name for pool in props.pools] if router_mode == "gateway" else []
        watched = bool(alert_models or alert_pools or slo is not None)
        self.alert_rules_yaml = (
            rule_groups_yaml(
                p.namespace,
                alert_models,
                pools=alert_pools,
                p95_latency_slo_seconds=slo,
                router_app=router_app,
                router_mode=router_mode,
            )
            if watched
            else ""
        )
        self.dashboard: dict[str, Any] | None = None
        if props.dashboard and watched:
            # Unique per namespace: Grafana's sidecar writes each data key as a file of one folder
            # (kiwigrid/k8s-sidecar#72), and a title twice in a folder stops provisioning (grafana/grafana#43530).
            # A pattern in the namespace named after it: as before.
            board = p.pattern if p.namespace == p.pattern else f"{p.pattern}-{p.namespace}"
            self.dashboard = dashboard(
                p.namespace,
                alert_models,
                pools=alert_pools,
                router_app=router_app,
                router_mode=router_mode,
                title=f"CPU inference — {board}",
            )
            model_objs += self._patched(
                [
                    {
                        "apiVersion": "v1",
                        "kind": "ConfigMap",
                        "metadata": {
                            "name": f"{p.pattern}-dashboard",
                            "namespace": p.namespace,
                            "labels": {"grafana_dashboard": "1", "app.kubernetes.io/part-of": p.pattern},
                        },
                        "data": {f"{board}.json": json.dumps(self.dashboard, sort_keys=True)},
                    }
                ]
            )

        model_key = lambda o: model_keys.get(_identity(o)) or object_key(o)  # noqa: E731
        at_home: dict[int, tuple[Construct, list[dict[str, Any]]]] = {}
        here: list[dict[str, Any]] = []
        for obj in model_objs:
            name = model_keys.get(_identity(obj), "").removeprefix("model/")
            if name in homes:
                at_home.setdefault(_identity(homes[name]), (homes[name], []))[1].append(obj)
            else:
                here.append(obj)
        self.model_manifests = (
            add_bounded_manifests(ic.cluster, "Models", here, scope=self, depends_on=deps, key=model_key)
            if here
            else []
        )
        # Per home (a nested stack): its models' objects in its own bounded manifests, after the same prerequisites.
        self.home_manifests: dict[int, list[eks.KubernetesManifest]] = {
            key: add_bounded_manifests(ic.cluster, "Models", objs, scope=home, depends_on=deps, key=model_key)
            for key, (home, objs) in at_home.items()
        }
        self.model_manifests += [m for ms in self.home_manifests.values() for m in ms]
        pool_deps = [*ns_deps, *props.depends_on, *([props.mountpoint.addon] if props.mountpoint is not None else [])]
        self.pool_manifests = (
            add_bounded_manifests(
                ic.cluster,
                "Pools",
                pool_objs,
                scope=self,
                depends_on=pool_deps,
                key=lambda o: pool_keys.get(_identity(o)) or object_key(o),
            )
            if pool_objs
            else []
        )
        self.router_manifests = (
            add_bounded_manifests(ic.cluster, "Router", router_objs, scope=self, depends_on=deps) if router_objs else []
        )

        self.scaled_object_manifests: list[eks.KubernetesManifest] = []
        specs = [c.scaled_object for n, c in self.charts.items() if c.scaled_object is not None and n not in homes]
        homed_specs = {n: c.scaled_object for n, c in self.charts.items() if c.scaled_object is not None and n in homes}
        specs += [c.scaled_object for c in self.pool_charts.values() if c.scaled_object is not None]
        if self.router_chart is not None and self.router_chart.scaled_object is not None:
            specs.append(self.router_chart.scaled_object)
        if specs:
            if props.keda is None:
                raise ValueError(
                    "InferenceWorkloadsProps: policy.keda renders ScaledObjects, which need keda (the Keda construct brings their CRDs)"
                )
            auth = (
                props.keda.trigger_authentication(p.namespace)
                if p.keda is not None and p.keda.authentication_ref
                else None
            )
            keda_objs = ([auth.to_dict()] if auth is not None else []) + [
                s.to_dict() for s in specs
            ]  # as add_scaled_objects
            scaling_id, scaling_scope = self._scaling_home(props.keda, id)
            parent_models = [m for m in self.model_manifests if cdk.Stack.of(m) is cdk.Stack.of(self)]
            self.scaled_object_manifests = props.keda.add_objects(
                scaling_id,
                self._patched(keda_objs),
                depends_on=[*parent_models, *self.pool_manifests, *self.router_manifests],
                scope=scaling_scope,
            )
        if homed_specs:
            if props.keda is None:
                raise ValueError(
                    "InferenceWorkloadsProps: policy.keda renders ScaledObjects, which need keda (the Keda construct brings their CRDs)"
                )
            # A homed model's ScaledObject lives beside its Deployment (its home's manifests), after the parent's
            # (which hold the namespace's TriggerAuthentication).
            for key, (home, _) in at_home.items():
                names = {n for n in homed_specs if _identity(homes[n]) == key}
                objs = self._patched([homed_specs[n].to_dict() for n in sorted(names)])
                if objs:
                    self.scaled_object_manifests += props.keda.add_objects(
                        "Scaling",
                        objs,
                        depends_on=[*self.home_manifests[key], *self.scaled_object_manifests],
                        scope=home,
                    )

        self.rule_groups: aps.CfnRuleGroupsNamespace | None = None
        if (
            props.alerts
            and self.alert_rules_yaml
            and props.metrics is not None
            and props.metrics.mode == "amp"
            and props.metrics.workspace_arn is not None
        ):
            self.rule_groups = aps.CfnRuleGroupsNamespace(
                self,
                "AlertRules",
                workspace=props.metrics.workspace_arn,
                name=f"cpu-inference-{p.namespace}",
                data=self.alert_rules_yaml,
            )

    def _scaling_home(self, keda: Keda, id: str) -> tuple[str, Construct | None]:
        """Where the ScaledObject manifests go: (construct id prefix, scope; None = the Keda construct).

        KEDA in this stack: in the Keda construct as `{id}Scaling*`, the logical ids every deployed stack has (a
        changed KubernetesManifest id deletes its objects in CloudFormation's cleanup, eks/manifests.py). When another
        InferenceWorkloads of the same id took that there (a second pattern on one platform),
        `{id}Scaling-<namespace>-*` (the patterns' namespaces differ). KEDA in another stack: here, as `Scaling*` — a
        manifest there waiting on this stack's manifests would make KEDA's stack depend on this one, which depends on
        it (a cycle)."""
        if cdk.Stack.of(keda).node.path != cdk.Stack.of(self).node.path:
            return "Scaling", self
        plain = re.compile(re.escape(f"{id}Scaling") + "[0-9a-f]+")  # add_bounded_manifests: `{id}{hex bucket}`
        if any(plain.fullmatch(c.node.id) for c in keda.node.children):
            return f"{id}Scaling-{self.policy.namespace}-", None
        return f"{id}Scaling", None

    def _patched(self, objs: Iterable[dict[str, Any]]) -> list[dict[str, Any]]:
        """The objects after props.kubernetes_patch (unchanged without one)."""
        patch = self.props.kubernetes_patch
        if patch is None:
            return list(objs)
        out: list[dict[str, Any]] = []
        for obj in objs:
            where = f"{obj.get('kind')}/{obj.get('metadata', {}).get('name')}"
            result = patch(obj)
            if result is not None and not isinstance(result, dict):
                raise TypeError(
                    f"InferenceWorkloadsProps.kubernetes_patch returned a {type(result).__name__} for {where}: "
                    "change the object in place and return None, or return a dict"
                )
            out.append(obj if result is None else result)
        return out

    def _effective_policy(self, props: InferenceWorkloadsProps) -> ServingPolicy:
        p = props.policy
        stack = cdk.Stack.of(self)
        changes: dict[str, Any] = {"kubernetes_minor": props.cluster.kubernetes_version or p.kubernetes_minor}
        if p.aws_region is None:
            changes["aws_region"] = stack.region
        m = props.metrics
        if p.keda is None and props.keda is not None and m is not None:
            auth = props.keda.trigger_authentication(p.namespace).name if m.aws_region is not None else None
            changes["keda"] = KedaSource(server_address=m.query_url, aws_region=m.aws_region, authentication_ref=auth)
        if m is not None and not p.metrics_cidrs:
            if m.mode == "amp":
                # The managed collector has no pod identity: allow its subnets. Pods share them (VPC CNI), so
                # the charts open only the metrics sidecar's port to these CIDRs, never the API port.
                changes["metrics_cidrs"] = self._scraper_cidrs(m)
                changes["metrics_namespaces"] = ()
            else:
                changes["metrics_namespaces"] = (m.props.namespace,)
        return replace(p, **changes)

    @staticmethod
    def _scraper_cidrs(m: Metrics) -> tuple[str, ...]:
        vpc = m.props.vpc
        subnets = vpc.private_subnets
        if m.props.scraper_subnet_ids:
            wanted = set(m.props.scraper_subnet_ids)
            chosen = [s for s in (*vpc.private_subnets, *vpc.isolated_subnets) if s.subnet_id in wanted]
            if len(chosen) != len(wanted):
                return (vpc.vpc_cidr_block,)
            subnets = chosen
        return tuple(s.ipv4_cidr_block for s in subnets)

    def _router_props(self, r: RouterChartProps, model_urls: dict[str, str]) -> RouterChartProps:
        p = self.policy
        changes: dict[str, Any] = {"pattern": p.pattern}
        config = r.router_config()  # slm_router.config.Config: the gateway's config, typed
        gw = config.gateway
        if r.mode == "gateway" and not gw.models and model_urls:
            # A dedicated base's adapters: their pod paths (the engine's LLAMA_LORA, echoed by GET /lora-adapters).
            adapters = {
                name: tuple(
                    GatewayAdapter(name=a.name, path=adapter_path(a.name), scale=a.scale)
                    for a in chart.props.model.adapters
                )
                for name, chart in self.charts.items()
            }
            gw = gw.updated(models=gateway_models(model_urls, adapters))
        if r.mode == "gateway" and self.pool_charts and not gw.pools:
            gw = gw.updated(pools=tuple(c.gateway_pool for c in self.pool_charts.values()))
            unset = {"cold_load_timeout_s": COLD_LOAD_TIMEOUT_S, "health_interval_s": HEALTH_INTERVAL_S}
            gw = gw.updated(**{k: v for k, v in unset.items() if k not in gw.set_keys()})
        if r.mode == "gateway" and gw.to_dict() != config.gateway.to_dict():
            changes["config"] = config.updated(gateway=gw)
        if r.keda is None and p.keda is not None:
            changes["keda"] = p.keda
        if r.metrics_namespaces == RouterChartProps.metrics_namespaces and not r.metrics_cidrs:
            changes["metrics_namespaces"] = p.metrics_namespaces
            changes["metrics_cidrs"] = p.metrics_cidrs
        return replace(r, **changes)

    def _model_role(self, md: ModelDeployment) -> iam.Role:
        name = md.workload.name
        role = iam.Role(
            self,
            f"{name}-Role",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
            description=f"Model {name} in {self.policy.namespace} (EKS Pod Identity): read its model files only",
        )
        if md.artifact is not None:
            md.artifact.grant_read(role)
        else:
            assert md.model_bucket is not None and md.read_prefix is not None
            md.model_bucket.grant_read(role, md.read_prefix)
        return role

    def _shared_role(self, models: list[ModelDeployment]) -> iam.Role:
        """The namespace's one role for its shared_identity models: read of each distinct (bucket, prefix) — for a
        farm, `farm/` of its model bucket, which its pools already read through Mountpoint."""
        role = iam.Role(
            self,
            "SharedModelsRole",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
            description=f"Dedicated models in {self.policy.namespace} (EKS Pod Identity): read their model prefix only",
        )
        granted: set[tuple[int, str]] = set()
        for md in models:
            assert md.model_bucket is not None and md.read_prefix is not None
            if (_identity(md.model_bucket), md.read_prefix) not in granted:
                granted.add((_identity(md.model_bucket), md.read_prefix))
                md.model_bucket.grant_read(role, md.read_prefix)
        return role

    def _associate(self, name: str, service_account: str, role: iam.IRole) -> eks.CfnPodIdentityAssociation:
        assoc = eks.CfnPodIdentityAssociation(
            self,
            f"{name}-PodIdentity",
            cluster_name=self.props.cluster.cluster.cluster_name,
            namespace=self.policy.namespace,
            service_account=service_account,
            role_arn=role.role_arn,
        )
        if self.props.cluster.pod_identity_agent is not None:
            assoc.node.add_dependency(self.props.cluster.pod_identity_agent)
        self.pod_identity_associations[name] = assoc
        return assoc
