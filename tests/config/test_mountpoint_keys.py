"""config.yaml `eks.install_mountpoint_addon`, `eks.mountpoint_version`, `eks.mountpoint_driver_role_arn`: the model
farm's Mountpoint for S3 CSI driver (review eks.md F3/F4). They reach the platform props of a model-farm config only;
a wrong combination fails with one line naming the key (the check is the construct's, MountpointSettings.validate)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from cpu_inference.config import ConfigError, parse
from cpu_inference.eks.inference_cluster import MOUNTPOINT_VERSION
from cpu_inference.eks.mountpoint import MountpointSettings
from cpu_inference.patterns.from_config import platform_props

ROOT = Path(__file__).resolve().parents[2]
ROLE = "arn:aws:iam::123456789012:role/S3CsiDriver"


def farm_doc(**eks: Any) -> dict[str, Any]:
    doc = yaml.safe_load((ROOT / "examples" / "model-farm-eks.yaml").read_text())
    doc.setdefault("eks", {}).update(eks)
    return doc


def props_of(doc: dict[str, Any]):
    return platform_props(parse(yaml.safe_dump(doc, sort_keys=False)))


def test_model_farm_defaults_install_the_pinned_driver() -> None:
    assert props_of(farm_doc()).mountpoint == MountpointSettings(True, MOUNTPOINT_VERSION, None)


def test_the_keys_reach_the_platform_props() -> None:
    props = props_of(farm_doc(install_mountpoint_addon=False, mountpoint_driver_role_arn=ROLE))
    assert props.mountpoint == MountpointSettings(install_mountpoint_addon=False, driver_role_arn=ROLE)
    props.validate()
    assert props_of(farm_doc(mountpoint_version="v2.6.0-eksbuild.1")).mountpoint == MountpointSettings(
        addon_version="v2.6.0-eksbuild.1"
    )


def test_an_slm_prefilter_config_gets_no_driver() -> None:
    doc = yaml.safe_load((ROOT / "config.yaml").read_text())
    doc["eks"] = {**doc.get("eks", {}), "install_mountpoint_addon": False}
    assert props_of(doc).mountpoint is None


@pytest.mark.parametrize(
    "eks,key",
    [
        ({"install_mountpoint_addon": False}, "eks.mountpoint_driver_role_arn"),
        ({"mountpoint_version": "v2.4.1-eksbuild.1"}, "eks.mountpoint_version"),
        ({"mountpoint_version": "v1.15.0-eksbuild.1"}, "eks.mountpoint_version"),
        ({"mountpoint_driver_role_arn": ROLE}, "eks.mountpoint_driver_role_arn"),
        (
            {"install_mountpoint_addon": False, "mountpoint_driver_role_arn": "S3CsiDriver"},
            "eks.mountpoint_driver_role_arn",
        ),
    ],
)
def test_wrong_combinations_name_the_key(eks: dict[str, Any], key: str) -> None:
    with pytest.raises(ValueError) as exc:
        props_of(farm_doc(**eks)).validate()
    message = str(exc.value)
    assert key in message and "\n" not in message


def test_the_keys_are_in_the_json_schema_and_a_typo_is_refused() -> None:
    schema = json.loads((ROOT / "config.schema.json").read_text())
    jsonschema.validate(
        farm_doc(
            install_mountpoint_addon=False, mountpoint_driver_role_arn=ROLE, mountpoint_version=MOUNTPOINT_VERSION
        ),
        schema,
    )
    with pytest.raises(ConfigError, match="install_mountpoint_adon"):
        parse(yaml.safe_dump(farm_doc(install_mountpoint_adon=False)))
