"""The Bottlerocket/SOCI node class: userData is TOML (written by tomli-w, parsed back with tomllib) with
the snapshotter and parallel-pull-unpack keys Bottlerocket ≥ 1.44 documents; the pin, volumes and IMDS
settings hold; and an image-cache snapshot lands on the data volume."""

from __future__ import annotations

import tomllib

import pytest

from cpu_inference.k8s.specs.bottlerocket import (
    DEFAULT_VERSION,
    MIN_VERSION,
    BottlerocketNodeClass,
    SociSettings,
    parse_version,
    user_data,
)
from tests.support.k8s import validate_custom


def node_class(**kw: object) -> BottlerocketNodeClass:
    base: dict[str, object] = {
        "name": "bottlerocket-soci",
        "role": "KarpenterNodeRole-demo",
        "subnet_selector_terms": ({"tags": {"karpenter.sh/discovery": "demo"}},),
        "security_group_selector_terms": ({"tags": {"aws:eks:cluster-name": "demo"}},),
    }
    base.update(kw)
    return BottlerocketNodeClass(**base)  # type: ignore[arg-type]


def test_user_data_parses_as_toml_with_the_soci_settings() -> None:
    settings = tomllib.loads(user_data())["settings"]
    assert settings["container-runtime"] == {"snapshotter": "soci"}
    soci = settings["container-runtime-plugins"]["soci-snapshotter"]
    assert soci == {
        "pull-mode": "parallel-pull-unpack",
        "parallel-pull-unpack": {
            "max-concurrent-downloads-per-image": 10,
            "concurrent-download-chunk-size": "16mb",
            "max-concurrent-unpacks-per-image": 6,
            "discard-unpacked-layers": True,
        },
    }


def test_user_data_tuning_and_extra_settings_round_trip() -> None:
    text = user_data(
        SociSettings(
            max_concurrent_downloads_per_image=20,
            concurrent_download_chunk_size="unlimited",
            max_concurrent_downloads=-1,
            max_concurrent_unpacks=8,
            discard_unpacked_layers=False,
        ),
        {
            "kubernetes": {"image-gc-high-threshold-percent": "85", "max-pods": 110},
            "container-runtime": {"max-container-log-line-size": 16384},
        },
    )
    settings = tomllib.loads(text)["settings"]
    ppu = settings["container-runtime-plugins"]["soci-snapshotter"]["parallel-pull-unpack"]
    assert ppu["max-concurrent-downloads-per-image"] == 20 and ppu["concurrent-download-chunk-size"] == "unlimited"
    assert (
        ppu["max-concurrent-downloads"] == -1
        and ppu["max-concurrent-unpacks"] == 8
        and ppu["discard-unpacked-layers"] is False
    )
    assert settings["kubernetes"] == {"image-gc-high-threshold-percent": "85", "max-pods": 110}
    assert settings["container-runtime"] == {"snapshotter": "soci", "max-container-log-line-size": 16384}


@pytest.mark.parametrize(
    ("soci", "extra", "message"),
    [
        (
            SociSettings(max_concurrent_downloads_per_image=0),
            None,
            "max_concurrent_downloads_per_image must be a positive integer",
        ),
        (SociSettings(max_concurrent_unpacks=0), None, "max_concurrent_unpacks must be -1"),
        (SociSettings(concurrent_download_chunk_size="16 MB"), None, "byte size"),
        (SociSettings(), {"container-runtime": {"snapshotter": "overlayfs"}}, r"override \['snapshotter'\]"),
    ],
)
def test_user_data_rejects_bad_settings(soci: SociSettings, extra: dict[str, object] | None, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        user_data(soci, extra)


def test_node_class_pins_bottlerocket_and_sets_fast_encrypted_volumes_and_imdsv2() -> None:
    d = node_class().to_dict()
    spec = d["spec"]
    assert spec["amiSelectorTerms"] == [{"alias": f"bottlerocket@{DEFAULT_VERSION}"}]
    assert parse_version(DEFAULT_VERSION) >= MIN_VERSION
    devices = {b["deviceName"]: b["ebs"] for b in spec["blockDeviceMappings"]}
    assert set(devices) == {"/dev/xvda", "/dev/xvdb"}
    assert devices["/dev/xvdb"] == {
        "volumeType": "gp3",
        "encrypted": True,
        "deleteOnTermination": True,
        "volumeSize": "100Gi",
        "iops": 6000,
        "throughput": 500,
    }
    assert devices["/dev/xvda"]["encrypted"] is True
    assert spec["metadataOptions"] == {
        "httpEndpoint": "enabled",
        "httpProtocolIPv6": "disabled",
        "httpPutResponseHopLimit": 1,
        "httpTokens": "required",
    }
    assert "amiFamily" not in spec  # the alias implies it
    assert tomllib.loads(spec["userData"])["settings"]["container-runtime"]["snapshotter"] == "soci"


def test_image_cache_snapshot_and_kms_key_go_to_the_volumes() -> None:
    key = "arn:aws:kms:us-east-1:123456789012:key/1234abcd-12ab-34cd-56ef-1234567890ab"
    spec = node_class(
        image_cache_snapshot_id="snap-0123456789abcdef0", kms_key_id=key, data_volume_size="200Gi"
    ).to_dict()["spec"]
    devices = {b["deviceName"]: b["ebs"] for b in spec["blockDeviceMappings"]}
    assert devices["/dev/xvdb"]["snapshotID"] == "snap-0123456789abcdef0"
    assert devices["/dev/xvdb"]["volumeSize"] == "200Gi"
    assert devices["/dev/xvdb"]["kmsKeyID"] == key and devices["/dev/xvda"]["kmsKeyID"] == key
    assert "snapshotID" not in devices["/dev/xvda"]


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"version": "v1.43.2"}, "predates SOCI parallel-pull-unpack"),
        ({"version": "latest"}, "must be pinned"),
        ({"image_cache_snapshot_id": "ami-0123"}, "EBS snapshot id"),
        ({"data_volume_iops": 100}, "iops 100"),
        ({"data_volume_throughput": 4000}, "throughput 4000"),
    ],
)
def test_node_class_rejects_bad_props(kwargs: dict[str, object], message: str) -> None:
    with pytest.raises(ValueError, match=message):
        node_class(**kwargs).to_dict()


def test_version_without_v_prefix_is_normalized() -> None:
    assert node_class(version="1.64.0").to_dict()["spec"]["amiSelectorTerms"] == [{"alias": "bottlerocket@v1.64.0"}]


def test_node_class_validates_against_the_upstream_crd() -> None:
    full = node_class(
        image_cache_snapshot_id="snap-0123456789abcdef0",
        kms_key_id="arn:aws:kms:us-east-1:123456789012:key/x",
        tags={"team": "ml"},
    )
    assert validate_custom(node_class().to_dict()) == []
    assert validate_custom(full.to_dict()) == []
