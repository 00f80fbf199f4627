"""Pattern 2 — high-density CPU model farm: many small models, each a thin right-sized workload, bin-packed on
shared memory-optimized nodes, scaled per model on queue depth (cold models to zero), behind one gateway."""

from __future__ import annotations

from dataclasses import dataclass

from constructs import Construct

from ..k8s.router_chart import RouterChartProps
from .deployment import DeploymentProps, eks_workloads, endpoints, served_policy
from .eks_platform import EksPlatform
from .serving_foundation import ServingFoundation, ServingFoundationProps

NAMESPACE = "model-farm"


@dataclass(frozen=True)
class ModelFarmProps:
    """deployment: the farm's models (role `farm`) and the target. gateway_replicas_min/max: the single
    OpenAI-compatible entry point that routes by the request's `model` (EKS)."""

    deployment: DeploymentProps
    gateway_replicas_min: int = 2
    gateway_replicas_max: int = 6

    def validate(self) -> None:
        self.deployment.validate()
        wrong = [m.name for m in self.deployment.models if m.role != "farm"]
        if wrong:
            raise ValueError(f"models {wrong} are not role farm — a model farm serves role farm only")
        if not 1 <= self.gateway_replicas_min <= self.gateway_replicas_max:
            raise ValueError(f"need 1 ≤ gateway_replicas_min ({self.gateway_replicas_min}) ≤ gateway_replicas_max ({self.gateway_replicas_max})")
        if self.deployment.target == "sagemaker":
            cold = [m.name for m in self.deployment.models if m.replicas_min < 1]
            if cold:
                raise ValueError(f"models {cold} have replicas.min 0: SageMaker real-time endpoints keep ≥ 1 instance — set min 1 or use target eks")


class ModelFarm(Construct):
    """Attributes: foundation; on EKS `platform`, `workloads` (model charts + the gateway); on SageMaker
    `endpoints` (name → GravitonEndpoint)."""

    def __init__(self, scope: Construct, id: str, *, props: ModelFarmProps) -> None:
        super().__init__(scope, id)
        props.validate()
        self.props = props
        d = props.deployment
        self.foundation = ServingFoundation(
            self, "Serving",
            props=ServingFoundationProps(models=d.models, bucket=d.bucket, engine_image=d.engine_image,
                                         router_image=d.router_image if d.target == "eks" else None),
        )
        self.platform: EksPlatform | None = None
        self.workloads = None
        self.endpoints = {}
        if d.target == "sagemaker":
            self.endpoints = endpoints(self, d, self.foundation)
            return
        self.platform = d.existing_platform or EksPlatform(self, "Platform", props=d.platform)
        assert self.foundation.router_image is not None
        gateway = RouterChartProps(
            image=self.foundation.router_image.image_uri,
            mode="gateway",
            name="gateway",
            namespace=NAMESPACE,
            pattern="model-farm",
            replicas_min=props.gateway_replicas_min,
            replicas_max=props.gateway_replicas_max,
            architectures=tuple(d.platform.node_pools.architectures),
        )
        policy = served_policy(d, namespace=NAMESPACE, pattern="model-farm", farm=True)
        self.workloads = eks_workloads(self, d, self.foundation, self.platform, policy=policy, router=gateway)
