"""Bottlerocket EC2NodeClass with the SOCI snapshotter in parallel-pull-unpack mode.

Multi-GB llama-server images add 30–60 s to pod start on a fresh node; SOCI's parallel pull downloads
layer chunks concurrently and unpacks layers in parallel (Bottlerocket ≥ 1.44 exposes it as settings).
The settings go to the node as Bottlerocket userData TOML, which Karpenter merges with the settings it
generates (cluster name, API endpoint, CA). Keys follow the Bottlerocket settings reference
(`settings.container-runtime.snapshotter`, `settings.container-runtime-plugins.soci-snapshotter.*`).
Parallel-pull-unpack works on any image and never reads a SOCI index (lazy loading from an index is an
AL2023 feature), so the images need none: LlamaCppImage publishes a plain Docker manifest list, which is
also the only multi-arch form SageMaker accepts.
"""

from __future__ import annotations

import re
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

import tomli_w

from cpu_inference.k8s.specs.karpenter_node_class import BlockDevice, EC2NodeClassSpec, MetadataOptions

MIN_VERSION = (1, 44, 0)  # first Bottlerocket release with the soci-snapshotter parallel-pull-unpack settings
# Pinned release: SOCI parallel pull needs ≥ 1.44, and the aws-k8s-1.35 variant ships only in later
# releases, so the pin must be one that has the variant of every Kubernetes minor the product targets.
DEFAULT_VERSION = "v1.64.0"
ROOT_DEVICE = "/dev/xvda"  # Bottlerocket's OS volume
DATA_DEVICE = "/dev/xvdb"  # Bottlerocket's data volume: container images, SOCI snapshots, logs
_BYTE_SIZE = re.compile(r"^(unlimited|[0-9]+([kmgt]i?b)?)$")


def parse_version(version: str) -> tuple[int, int, int]:
    m = re.match(r"^v?(\d+)\.(\d+)\.(\d+)$", version)
    if not m:
        raise ValueError(
            f"Bottlerocket version {version!r} must be pinned as vMAJOR.MINOR.PATCH, e.g. {DEFAULT_VERSION}"
        )
    return int(m.group(1)), int(m.group(2)), int(m.group(3))


@dataclass(frozen=True)
class SociSettings:
    """SOCI parallel-pull-unpack tuning. Defaults suit multi-GB images on nodes with a fast gp3 data
    volume (6000 IOPS / 500 MB/s): more chunks in flight per image than Bottlerocket's default of 3,
    16 MB chunks, parallel unpacks, and compressed layers discarded once unpacked to save disk."""

    max_concurrent_downloads_per_image: int = 10
    concurrent_download_chunk_size: str = "16mb"
    max_concurrent_unpacks_per_image: int = 6
    discard_unpacked_layers: bool = True
    max_concurrent_downloads: int | None = None  # across images; None keeps Bottlerocket's default
    max_concurrent_unpacks: int | None = None

    def validate(self) -> None:
        for name in ("max_concurrent_downloads_per_image", "max_concurrent_unpacks_per_image"):
            if getattr(self, name) < 1:
                raise ValueError(f"SOCI {name} must be a positive integer")
        for name in ("max_concurrent_downloads", "max_concurrent_unpacks"):
            v = getattr(self, name)
            if v is not None and v != -1 and v < 1:
                raise ValueError(f"SOCI {name} must be -1 (unbounded) or a positive integer")
        if not _BYTE_SIZE.match(self.concurrent_download_chunk_size.lower()):
            raise ValueError(
                f"SOCI concurrent_download_chunk_size {self.concurrent_download_chunk_size!r} must be a byte size like 16mb or unlimited"
            )

    def to_settings(self) -> dict[str, Any]:
        ppu: dict[str, Any] = {
            "max-concurrent-downloads-per-image": self.max_concurrent_downloads_per_image,
            "concurrent-download-chunk-size": self.concurrent_download_chunk_size,
            "max-concurrent-unpacks-per-image": self.max_concurrent_unpacks_per_image,
            "discard-unpacked-layers": self.discard_unpacked_layers,
        }
        if self.max_concurrent_downloads is not None:
            ppu["max-concurrent-downloads"] = self.max_concurrent_downloads
        if self.max_concurrent_unpacks is not None:
            ppu["max-concurrent-unpacks"] = self.max_concurrent_unpacks
        return {"pull-mode": "parallel-pull-unpack", "parallel-pull-unpack": ppu}


def user_data(soci: SociSettings = SociSettings(), extra_settings: Mapping[str, Any] | None = None) -> str:
    """Bottlerocket userData TOML: the SOCI snapshotter in parallel-pull-unpack mode, plus any extra
    settings (merged one level deep under `settings`,
    e.g. {"kubernetes": {"image-gc-high-threshold-percent": "85"}})."""
    soci.validate()
    settings: dict[str, Any] = {
        "container-runtime": {"snapshotter": "soci"},
        "container-runtime-plugins": {"soci-snapshotter": soci.to_settings()},
    }
    for key, value in (extra_settings or {}).items():
        if key in settings and isinstance(value, Mapping):
            overlap = set(settings[key]) & set(value)
            if overlap:
                raise ValueError(f"extra_settings.{key} would override {sorted(overlap)} that the SOCI setup owns")
            settings[key] = {**settings[key], **value}
        else:
            settings[key] = value
    return tomli_w.dumps({"settings": settings})


@dataclass(frozen=True)
class BottlerocketNodeClass:
    """Props for a Bottlerocket EC2NodeClass tuned for CPU inference.

    - `version`: pinned Bottlerocket release (alias `bottlerocket@<version>`), ≥ v1.44.0.
    - data volume: encrypted gp3 /dev/xvdb, 100 GiB / 6000 IOPS / 500 MiB/s by default; `kms_key_id`
      selects a customer key (the Karpenter controller needs grants on it — Karpenter does that when
      given the key).
    - `image_cache_snapshot_id`: an EBS snapshot of a data volume with the images pre-pulled. It must be
      built on a node that uses the same snapshotter (soci): Bottlerocket deletes the images under
      /var/lib/containerd and /var/lib/soci-snapshotter when it sees the snapshotter change across boots,
      so an overlayfs-built cache would be wiped on first boot.
    - IMDSv2 required with hop limit 1, so pods cannot read the node role's credentials.
    """

    name: str
    role: str
    subnet_selector_terms: tuple[Mapping[str, Any], ...]
    security_group_selector_terms: tuple[Mapping[str, Any], ...]
    version: str = DEFAULT_VERSION
    soci: SociSettings = SociSettings()
    extra_settings: Mapping[str, Any] = field(default_factory=dict)
    root_volume_size: str = "4Gi"
    data_volume_size: str = "100Gi"
    data_volume_iops: int = 6000
    data_volume_throughput: int = 500
    kms_key_id: str | None = None
    image_cache_snapshot_id: str | None = None
    tags: Mapping[str, str] = field(default_factory=dict)
    kubelet: Mapping[str, Any] | None = None

    def validate(self) -> None:
        if parse_version(self.version) < MIN_VERSION:
            raise ValueError(
                f"Bottlerocket {self.version} predates SOCI parallel-pull-unpack — use v1.44.0 or later (default {DEFAULT_VERSION})"
            )
        if self.image_cache_snapshot_id is not None and not re.match(r"^snap-[0-9a-f]+$", self.image_cache_snapshot_id):
            raise ValueError(
                f"image_cache_snapshot_id {self.image_cache_snapshot_id!r} must be an EBS snapshot id like snap-0123abcd"
            )

    def spec(self) -> EC2NodeClassSpec:
        self.validate()
        version = self.version if self.version.startswith("v") else f"v{self.version}"
        devices = (
            BlockDevice(ROOT_DEVICE, volume_size=self.root_volume_size, kms_key_id=self.kms_key_id),
            BlockDevice(
                DATA_DEVICE,
                volume_size=self.data_volume_size,
                iops=self.data_volume_iops,
                throughput=self.data_volume_throughput,
                kms_key_id=self.kms_key_id,
                snapshot_id=self.image_cache_snapshot_id,
            ),
        )
        return EC2NodeClassSpec(
            name=self.name,
            role=self.role,
            ami_selector_terms=({"alias": f"bottlerocket@{version}"},),
            subnet_selector_terms=self.subnet_selector_terms,
            security_group_selector_terms=self.security_group_selector_terms,
            block_device_mappings=devices,
            metadata_options=MetadataOptions(),
            user_data=user_data(self.soci, self.extra_settings),
            tags=self.tags,
            kubelet=self.kubelet,
        )

    def to_dict(self) -> dict[str, Any]:
        return self.spec().to_dict()
