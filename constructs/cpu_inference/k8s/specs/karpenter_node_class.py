"""Typed Karpenter v1 EC2NodeClass (`karpenter.k8s.aws/v1`): AMI/subnet/security-group selectors, encrypted gp3
block devices, IMDSv2-only metadata options, rendered to the CRD's dict; `validate()` repeats its CEL rules."""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from cpu_inference.k8s.specs.karpenter_rules import NODECLASS_API, RESTRICTED_TAG_PREFIXES, RESTRICTED_TAGS, check_name


@dataclass(frozen=True)
class BlockDevice:
    """One EBS block-device mapping. Encrypted gp3 by default."""

    device_name: str
    volume_size: str | None = "100Gi"
    volume_type: str = "gp3"
    iops: int | None = None
    throughput: int | None = None  # MiB/s, gp3 only
    encrypted: bool = True
    kms_key_id: str | None = None
    snapshot_id: str | None = None
    delete_on_termination: bool = True
    root_volume: bool = False

    def validate(self) -> None:
        if self.volume_size is None and self.snapshot_id is None:
            raise ValueError(f"block device {self.device_name}: set volume_size or snapshot_id")
        if self.volume_size is not None and not re.match(r"^[1-9][0-9]*Gi$", self.volume_size):
            raise ValueError(
                f"block device {self.device_name}: volume_size {self.volume_size!r} must be whole GiB like 100Gi"
            )
        if self.throughput is not None and self.volume_type != "gp3":
            raise ValueError(f"block device {self.device_name}: throughput is only configurable on gp3")
        if self.volume_type == "gp3":
            if self.iops is not None and not 3000 <= self.iops <= 80000:
                raise ValueError(f"block device {self.device_name}: gp3 iops {self.iops} must be 3000–80000")
            if self.throughput is not None and not 125 <= self.throughput <= 2000:
                raise ValueError(
                    f"block device {self.device_name}: gp3 throughput {self.throughput} MiB/s must be 125–2000"
                )
        if self.kms_key_id is not None and not self.encrypted:
            raise ValueError(f"block device {self.device_name}: a KMS key needs encrypted=True")

    def to_dict(self) -> dict[str, Any]:
        ebs: dict[str, Any] = {
            "volumeType": self.volume_type,
            "encrypted": self.encrypted,
            "deleteOnTermination": self.delete_on_termination,
        }
        if self.volume_size is not None:
            ebs["volumeSize"] = self.volume_size
        if self.iops is not None:
            ebs["iops"] = self.iops
        if self.throughput is not None:
            ebs["throughput"] = self.throughput
        if self.kms_key_id is not None:
            ebs["kmsKeyID"] = self.kms_key_id
        if self.snapshot_id is not None:
            ebs["snapshotID"] = self.snapshot_id
        out: dict[str, Any] = {"deviceName": self.device_name, "ebs": ebs}
        if self.root_volume:
            out["rootVolume"] = True
        return out


@dataclass(frozen=True)
class MetadataOptions:
    """IMDS settings. IMDSv2 only, hop limit 1: pods cannot reach the node role's credentials."""

    http_tokens: str = "required"
    http_put_response_hop_limit: int = 1
    http_endpoint: str = "enabled"
    http_protocol_ipv6: str = "disabled"

    def to_dict(self) -> dict[str, Any]:
        return {
            "httpEndpoint": self.http_endpoint,
            "httpProtocolIPv6": self.http_protocol_ipv6,
            "httpPutResponseHopLimit": self.http_put_response_hop_limit,
            "httpTokens": self.http_tokens,
        }


@dataclass(frozen=True)
class EC2NodeClassSpec:
    """A Karpenter EC2NodeClass. Selector terms are lists of dicts exactly as in the CRD
    (e.g. {"tags": {"karpenter.sh/discovery": "my-cluster"}} or {"id": "subnet-0abc"})."""

    name: str
    role: str
    ami_selector_terms: tuple[Mapping[str, Any], ...]
    subnet_selector_terms: tuple[Mapping[str, Any], ...]
    security_group_selector_terms: tuple[Mapping[str, Any], ...]
    ami_family: str | None = None
    block_device_mappings: tuple[BlockDevice, ...] = ()
    metadata_options: MetadataOptions = MetadataOptions()
    user_data: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    kubelet: Mapping[str, Any] | None = None
    detailed_monitoring: bool | None = None
    associate_public_ip_address: bool | None = False

    def validate(self) -> None:
        check_name("EC2NodeClass", self.name)
        if not self.role:
            raise ValueError(f"EC2NodeClass {self.name}: role cannot be empty")
        if not self.ami_selector_terms:
            raise ValueError(f"EC2NodeClass {self.name}: amiSelectorTerms cannot be empty")
        aliases = [t["alias"] for t in self.ami_selector_terms if "alias" in t]
        if aliases:
            if len(self.ami_selector_terms) != 1 or len(self.ami_selector_terms[0]) != 1:
                raise ValueError(
                    f"EC2NodeClass {self.name}: an alias amiSelectorTerm must be the only term and have no other fields"
                )
            family = aliases[0].split("@")[0]
            if not re.match(r"^[a-zA-Z0-9]+@.+$", aliases[0]) or family not in (
                "al2",
                "al2023",
                "bottlerocket",
                "windows2019",
                "windows2022",
                "windows2025",
            ):
                raise ValueError(
                    f"EC2NodeClass {self.name}: alias {aliases[0]!r} must be family@version, e.g. bottlerocket@v1.64.0"
                )
        elif self.ami_family is None:
            raise ValueError(f"EC2NodeClass {self.name}: set ami_family when amiSelectorTerms has no alias")
        for kind, terms, keys in (
            ("subnetSelectorTerms", self.subnet_selector_terms, ("tags", "id")),
            ("securityGroupSelectorTerms", self.security_group_selector_terms, ("tags", "id", "name")),
        ):
            if not terms:
                raise ValueError(f"EC2NodeClass {self.name}: {kind} cannot be empty")
            for t in terms:
                if not any(k in t for k in keys):
                    raise ValueError(f"EC2NodeClass {self.name}: each {kind} entry needs one of {keys}")
                if "tags" in t and any(not k or not v for k, v in t["tags"].items()):
                    raise ValueError(f"EC2NodeClass {self.name}: {kind} tags need non-empty keys and values")
        for k in self.tags:
            if not k or k in RESTRICTED_TAGS or k.startswith(RESTRICTED_TAG_PREFIXES):
                raise ValueError(f"EC2NodeClass {self.name}: tag {k!r} is reserved by Karpenter")
        if sum(1 for b in self.block_device_mappings if b.root_volume) > 1:
            raise ValueError(f"EC2NodeClass {self.name}: only one block device may be the root volume")
        for b in self.block_device_mappings:
            b.validate()
        if self.metadata_options.http_tokens not in ("required", "optional"):
            raise ValueError(f"EC2NodeClass {self.name}: httpTokens must be required or optional")

    def to_dict(self) -> dict[str, Any]:
        self.validate()
        spec: dict[str, Any] = {
            "role": self.role,
            "amiSelectorTerms": [dict(t) for t in self.ami_selector_terms],
            "subnetSelectorTerms": [dict(t) for t in self.subnet_selector_terms],
            "securityGroupSelectorTerms": [dict(t) for t in self.security_group_selector_terms],
            "metadataOptions": self.metadata_options.to_dict(),
        }
        if self.ami_family is not None:
            spec["amiFamily"] = self.ami_family
        if self.block_device_mappings:
            spec["blockDeviceMappings"] = [b.to_dict() for b in self.block_device_mappings]
        if self.user_data is not None:
            spec["userData"] = self.user_data
        if self.tags:
            spec["tags"] = dict(self.tags)
        if self.kubelet:
            spec["kubelet"] = dict(self.kubelet)
        if self.detailed_monitoring is not None:
            spec["detailedMonitoring"] = self.detailed_monitoring
        if self.associate_public_ip_address is not None:
            spec["associatePublicIPAddress"] = self.associate_public_ip_address
        return {"apiVersion": NODECLASS_API, "kind": "EC2NodeClass", "metadata": {"name": self.name}, "spec": spec}
