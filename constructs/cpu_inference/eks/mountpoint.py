"""MountpointS3Csi: the Mountpoint for Amazon S3 CSI driver as an EKS add-on, reading the model farm's prefix.

The multi-model pools (k8s/model_pool_chart.py) mount `s3://<bucket>/farm/` read-only at /models through a
static PersistentVolume of driver `s3.csi.aws.com` instead of copying every model into every pod.

- Add-on name `aws-mountpoint-s3-csi-driver` (EKS user guide, "Mountpoint for Amazon S3 CSI Driver" add-on page).
  v2 of the driver is required: it runs Mountpoint in its own pods (namespace `mount-s3`) shared by every
  workload on a node that mounts the same volume with the same options and credentials
  (docs/MOUNTPOINT_POD_SHARING.md), honours the pod's fsGroup (docs/UPGRADING_TO_V2.md) and supports EKS Pod
  Identity. `addon_version=None` takes EKS's default build for the cluster's version (v2 on every minor this
  library supports); pin one with `aws eks describe-addon-versions --addon-name aws-mountpoint-s3-csi-driver`.
- Credentials: driver-level, through EKS Pod Identity on the driver's service account `s3-csi-driver-sa` in
  kube-system (docs/CONFIGURATION.md, "Driver-Level Credentials with EKS Pod Identity": "the recommended way ...
  in an EKS Cluster"), passed as the add-on's own pod identity association (EKS user guide "Use Pod Identities to
  assign an IAM role to an Amazon EKS add-on"). The role may only list and read the farm prefix
  (ModelBucket.grant_read: s3:GetObject on `farm/*`, s3:ListBucket with an `s3:prefix` condition, kms:Decrypt
  through the bucket key) — what mountpoint-s3 doc/CONFIGURATION.md "IAM permissions" asks for a read-only
  prefix mount. The pool pods themselves hold no AWS credentials and need no egress to S3.
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from aws_cdk import aws_eks_v2 as eks
from aws_cdk import aws_iam as iam
from constructs import Construct

from ..artifacts.model_bucket import ModelBucket
from ..k8s.model_pool_chart import CSI_DRIVER, FARM_PREFIX
from .inference_cluster import InferenceCluster

ADDON_NAME = "aws-mountpoint-s3-csi-driver"
DRIVER_NAMESPACE = "kube-system"
DRIVER_SERVICE_ACCOUNT = "s3-csi-driver-sa"  # the node plugin's service account (chart value node.serviceAccount.name)
POD_IDENTITY_PRINCIPAL = "pods.eks.amazonaws.com"
_V2_VERSION = re.compile(r"^v2\.\d+\.\d+-eksbuild\.\d+$")


@dataclass(frozen=True)
class MountpointS3CsiProps:
    """cluster: the InferenceCluster. model_bucket: the bucket holding the farm. prefix: what the driver may read
    (the catalog's `farm/`). addon_version: a v2 build (`v2.x.y-eksbuild.n`) or None for EKS's default."""

    cluster: InferenceCluster
    model_bucket: ModelBucket
    prefix: str = FARM_PREFIX
    addon_version: str | None = None

    def validate(self) -> None:
        if self.addon_version is not None and not _V2_VERSION.match(self.addon_version):
            raise ValueError(f"MountpointS3CsiProps.addon_version {self.addon_version!r} must be a v2 build like v2.7.0-eksbuild.1 "
                             "(pods share Mountpoint and honour fsGroup only from v2), or None for EKS's default")
        if not self.prefix.endswith("/") or self.prefix.startswith("/"):
            raise ValueError(f"MountpointS3CsiProps.prefix must be a key prefix ending in '/' (e.g. farm/), got {self.prefix!r}")


class MountpointS3Csi(Construct):
    """Attributes: addon (eks.Addon), role (the driver's read-only role), driver (`s3.csi.aws.com`),
    bucket_name, prefix."""

    def __init__(self, scope: Construct, id: str, *, props: MountpointS3CsiProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        self.driver = CSI_DRIVER
        self.prefix = props.prefix
        self.bucket_name = props.model_bucket.bucket.bucket_name
        self.role = iam.Role(
            self, "DriverRole",
            assumed_by=iam.SessionTagsPrincipal(iam.ServicePrincipal(POD_IDENTITY_PRINCIPAL)),
            description=f"Mountpoint for S3 CSI driver (EKS Pod Identity): read-only {props.prefix} of the model bucket",
        )
        props.model_bucket.grant_read(self.role, props.prefix)
        self.addon = eks.Addon(self, "Addon", cluster=props.cluster.cluster, addon_name=ADDON_NAME, addon_version=props.addon_version)
        cfn = self.addon.node.default_child
        assert isinstance(cfn, eks.CfnAddon)
        cfn.pod_identity_associations = [eks.CfnAddon.PodIdentityAssociationProperty(
            role_arn=self.role.role_arn, service_account=DRIVER_SERVICE_ACCOUNT)]
        if props.cluster.pod_identity_agent is not None:
            self.addon.node.add_dependency(props.cluster.pod_identity_agent)
