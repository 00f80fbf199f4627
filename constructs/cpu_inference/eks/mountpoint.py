"""MountpointS3Csi: the Mountpoint for Amazon S3 CSI driver of a cluster — the EKS add-on, installed once per cluster by
the platform (EksPlatform `mountpoint`), and the driver role every model farm on that cluster grants its prefix to.

The multi-model pools (k8s/charts/model_pool_chart.py) mount `s3://<bucket>/farm/` read-only at /models through a
static PersistentVolume of driver `s3.csi.aws.com` instead of copying every model into every pod.

- Add-on name `aws-mountpoint-s3-csi-driver` (EKS user guide, "Mountpoint for Amazon S3 CSI Driver" add-on page).
  EKS allows one add-on of a name per cluster (CreateAddon: ResourceInUseException when it exists), so the add-on is
  the platform's, never a farm's: two farms on one platform share it. A cluster that already runs the driver (an
  add-on or the Helm chart) takes `install_mountpoint_addon=False` plus the role its driver runs with.
- Version: pinned (inference_cluster.MOUNTPOINT_VERSION), a v2 build ≥ v2.5.0. v2 runs Mountpoint in its own pods
  (namespace `mount-s3`) shared by every workload on a node that mounts the same volume with the same options and
  credentials (docs/MOUNTPOINT_POD_SHARING.md), honours the pod's fsGroup (docs/UPGRADING_TO_V2.md) and takes an EKS
  Pod Identity association (v1 builds refused one: mountpoint-s3-csi-driver#215). v2.5.0 (CHANGELOG.md) keeps
  Mountpoint pods until their workload pods are gone (#693) and forwards cacheEmptyDirSizeLimit as --max-cache-size so
  the cache cannot outgrow its emptyDir and get the Mountpoint pod evicted (#743) — both matter to the pools.
- Controller placement: the v2 controller (Deployment s3-csi-controller) creates the Mountpoint pods; the chart gives it
  no tolerations by default (charts/aws-mountpoint-s3-csi-driver/templates/controller.yaml: `tolerations:` only from
  `.Values.controller.tolerations`, "TODO: Should we add some default tolerations for controller?") and INSTALL.md
  ("Configuring nodeSelector for the controller component") recommends a nodeSelector. The add-on's
  configurationValues put it on the system nodes (CriticalAddonsOnly toleration + the system node label), not on
  Spot workload nodes. (The node DaemonSet tolerates every taint: values.yaml `node.tolerateAllTaints: true`.)
- Credentials: driver-level, through EKS Pod Identity on the driver's service account `s3-csi-driver-sa` in
  kube-system (docs/CONFIGURATION.md, "Driver-Level Credentials with EKS Pod Identity": "the recommended way ...
  in an EKS Cluster"), passed as the add-on's own pod identity association (EKS user guide "Use Pod Identities to
  assign an IAM role to an Amazon EKS add-on"). Driver-level credentials are cluster-wide ("By setting driver-level
  credentials, the whole cluster uses the same set of credentials"), so each farm grants ITS prefix to this one role
  (`grant_read`): s3:GetObject on `farm/*`, s3:ListBucket with an `s3:prefix` condition, kms:Decrypt through the
  bucket key — what mountpoint-s3 doc/CONFIGURATION.md "IAM permissions" asks for a read-only prefix mount. With a
  driver that was already installed, the farm grants the same to the role that driver runs with (driver_role_arn:
  its Pod Identity/IRSA role, or the node role if it falls back to instance profiles). The pool pods themselves hold
  no AWS credentials and need no egress to S3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

import aws_cdk as cdk
from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from cpu_inference._internal import nag
from cpu_inference.artifacts.model_bucket import ModelBucket
from cpu_inference.eks.inference_cluster import MOUNTPOINT_VERSION, InferenceCluster
from cpu_inference.k8s.charts.model_pool_chart import CSI_DRIVER
from cpu_inference.k8s.specs.default_node_pools import MOUNTPOINT_STARTUP_TAINT
from cpu_inference.k8s.specs.karpenter_node_pool import Taint
from model_download.catalog import FARM_PREFIX

ADDON_NAME = "aws-mountpoint-s3-csi-driver"
DRIVER_NAMESPACE = "kube-system"
DRIVER_SERVICE_ACCOUNT = "s3-csi-driver-sa"  # the node plugin's service account (chart value node.serviceAccount.name)
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
_V2_VERSION = re.compile(r"^v2\.(\d+)\.(\d+)-eksbuild\.\d+$")
MIN_MINOR = 5  # v2.5.0: see the module docstring (graceful Mountpoint-pod eviction, cache bounded by its emptyDir)
_ROLE_ARN = re.compile(r"^arn:aws[a-z-]*:iam::\d{12}:role/")


def mountpoint_version_error(version: str) -> str | None:
    """Why `version` is not a usable add-on build (a v2 build ≥ v2.5.0, `v2.x.y-eksbuild.n`), or None."""
    m = _V2_VERSION.match(version) if isinstance(version, str) else None  # None: unpinned, no longer offered
    if m is None or int(m[1]) < MIN_MINOR:
        return (
            f"mountpoint_version {version!r} must be a build of driver v2.5.0 or later like {MOUNTPOINT_VERSION} "
            f"(config key eks.mountpoint_version; list them with aws eks describe-addon-versions --addon-name {ADDON_NAME})"
        )
    return None


@dataclass(frozen=True)
class MountpointSettings:
    """The platform's Mountpoint for S3 CSI driver (mirrors config.yaml `eks.install_mountpoint_addon`,
    `eks.mountpoint_version`, `eks.mountpoint_driver_role_arn`).

    install_mountpoint_addon: install the EKS add-on (pinned to addon_version) with its own Pod Identity role.
    False when the cluster already runs the driver: then driver_role_arn is the IAM role that driver uses (its Pod
    Identity/IRSA role), which each farm on the platform is granted its prefix on."""

    install_mountpoint_addon: bool = True
    addon_version: str = MOUNTPOINT_VERSION
    driver_role_arn: str | None = None

    def validate(self) -> None:
        if self.install_mountpoint_addon:
            error = mountpoint_version_error(self.addon_version)
            if error:
                raise ValueError(error)
            if self.driver_role_arn is not None:
                raise ValueError(
                    "MountpointSettings.driver_role_arn names the role of a driver you installed yourself: set it only with "
                    "install_mountpoint_addon=False (config: eks.mountpoint_driver_role_arn with eks.install_mountpoint_addon: false)"
                )
        elif self.driver_role_arn is None:
            raise ValueError(
                "MountpointSettings: install_mountpoint_addon=False needs driver_role_arn, the IAM role the installed driver reads S3 with "
                "(each farm grants it its prefix) — config: set eks.mountpoint_driver_role_arn"
            )
        elif not cdk.Token.is_unresolved(self.driver_role_arn) and not _ROLE_ARN.match(self.driver_role_arn):
            raise ValueError(
                f"MountpointSettings.driver_role_arn {self.driver_role_arn!r} must be an IAM role ARN such as "
                "arn:aws:iam::123456789012:role/S3CsiDriver (config: eks.mountpoint_driver_role_arn)"
            )


@dataclass(frozen=True)
class MountpointS3CsiProps:
    """cluster: the InferenceCluster. install_addon / addon_version / driver_role_arn: as MountpointSettings
    (`for_cluster`). model_bucket + prefix (optional): grant that prefix to the driver role here; a farm on a shared
    platform calls `grant_read` instead."""

    cluster: InferenceCluster
    model_bucket: ModelBucket | None = None
    prefix: str = FARM_PREFIX
    addon_version: str = MOUNTPOINT_VERSION
    install_addon: bool = True
    driver_role_arn: str | None = None

    @classmethod
    def for_cluster(
        cls, cluster: InferenceCluster, settings: MountpointSettings = MountpointSettings()
    ) -> MountpointS3CsiProps:
        return cls(
            cluster=cluster,
            addon_version=settings.addon_version,
            install_addon=settings.install_mountpoint_addon,
            driver_role_arn=settings.driver_role_arn,
        )

    @property
    def settings(self) -> MountpointSettings:
        return MountpointSettings(
            install_mountpoint_addon=self.install_addon,
            addon_version=self.addon_version,
            driver_role_arn=self.driver_role_arn,
        )

    def validate(self) -> None:
        try:
            self.settings.validate()
        except ValueError as exc:  # the same checks; say it in this class's terms (v1 builds: "v2 build" is the point)
            raise ValueError(
                f"MountpointS3CsiProps: {exc} — the pools need a v2 build (shared Mountpoint pods, fsGroup, Pod Identity)"
            ) from None
        if not self.prefix.endswith("/") or self.prefix.startswith("/"):
            raise ValueError(
                f"MountpointS3CsiProps.prefix must be a key prefix ending in '/' (e.g. farm/), got {self.prefix!r}"
            )


def controller_values(cluster: InferenceCluster) -> dict[str, Any]:
    """Add-on configurationValues: the s3-csi-controller on the system nodes (chart templates/controller.yaml reads
    `.Values.controller.nodeSelector` and `.Values.controller.tolerations`)."""
    return {
        "controller": {
            "tolerations": [dict(t) for t in cluster.system_tolerations],
            "nodeSelector": dict(cluster.system_node_selector),
        }
    }


class MountpointS3Csi(Construct):
    """Attributes: addon (eks.Addon, None when the cluster already runs the driver), role (the driver's IAM role:
    created read-nothing, or the imported driver_role_arn), driver (`s3.csi.aws.com`), startup_taints (for the
    NodePools that host pool pods: the driver's startup taint when this construct installs the driver, else ()),
    prefix, and bucket_name when props.model_bucket is given."""

    def __init__(self, scope: Construct, id: str, *, props: MountpointS3CsiProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.driver = CSI_DRIVER
        self.prefix = props.prefix
        self.addon: eks.Addon | None = None
        self.role: iam.IRole
        self.startup_taints: tuple[Taint, ...] = ()
        self.bucket_name: str | None = None
        if props.install_addon:
            self.role = iam.Role(
                self,
                "DriverRole",
                assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
                description="Mountpoint for S3 CSI driver (EKS Pod Identity): read-only model prefixes granted by each farm",
            )
            self.addon = eks.Addon(
                self,
                "Addon",
                cluster=props.cluster.cluster,
                addon_name=ADDON_NAME,
                addon_version=props.addon_version,
                configuration_values=controller_values(props.cluster),
            )
            cfn = self.addon.node.default_child
            assert isinstance(cfn, eks.CfnAddon)
            cfn.pod_identity_associations = [
                eks.CfnAddon.PodIdentityAssociationProperty(
                    role_arn=self.role.role_arn, service_account=DRIVER_SERVICE_ACCOUNT
                )
            ]
            for dep in (props.cluster.pod_identity_agent, props.cluster.system_nodegroup):
                if dep is not None:  # the association needs the agent; the controller needs its (system) nodes
                    self.addon.node.add_dependency(dep)
            # A driver we install is ≥ v2.5.0, so it removes the taint (v2.1.0+); one we did not install might not.
            self.startup_taints = (MOUNTPOINT_STARTUP_TAINT,)
        else:
            assert props.driver_role_arn is not None  # validate()
            self.role = iam.Role.from_role_arn(self, "DriverRole", props.driver_role_arn, mutable=True)
        if props.model_bucket is not None:
            self.bucket_name = props.model_bucket.bucket.bucket_name
            props.model_bucket.grant_read(self.role, props.prefix)

    def grant_read(self, scope: Construct, model_bucket: ModelBucket, prefix: str = FARM_PREFIX) -> iam.Grant:
        """Let the driver read `prefix` of `model_bucket` (a farm's). In this construct's stack the statements join the
        role's policy; from another stack they go into a Policy of `scope`'s stack attached to the role by name, so the
        platform's stack never refers back to a farm's (the farm already depends on the platform)."""
        grantee = self.role
        if cdk.Stack.of(scope) is not cdk.Stack.of(self):
            grantee = iam.Role.from_role_arn(scope, "MountpointDriverRole", self.role.role_arn, mutable=True)
        grant = model_bucket.grant_read(grantee, prefix)
        if not isinstance(grantee, Construct):  # an imported role (a jsii proxy): ModelBucket cannot acknowledge on it
            nag.acknowledge_wildcards(
                grantee,
                {
                    rf"Resource::(<[^>]+\.Arn>|arn:[^*]+)/{re.escape(prefix)}\*": "The Mountpoint driver reads one farm's model prefix: object keys under it vary by design"
                },
            )
        return grant
