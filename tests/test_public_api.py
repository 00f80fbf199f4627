"""Everything the README promises is importable from `cpu_inference`, type checkers see it, and the pure side stays
light.

The public surface: `cpu_inference.__all__` (lazy for the constructs, mirrored under TYPE_CHECKING), each subpackage's
`__all__` (what users construct; internals stay in their modules), and `cpu_inference.testing` (test helpers)."""

from __future__ import annotations

import ast
import importlib
import inspect
import re
import subprocess
import sys
from pathlib import Path

import pytest

import cpu_inference

PACKAGE = Path(cpu_inference.__file__).parent
README = Path(__file__).resolve().parents[1] / "README.md"
JSII = ("aws_cdk", "jsii", "constructs", "cdk8s", "cdk8s_plus_27")
SUBPACKAGES = ("artifacts", "config", "eks", "evaluation", "images", "k8s", "patterns", "sagemaker", "testing")


def _type_checking_imports() -> dict[str, set[str]]:
    """module → names imported under `if TYPE_CHECKING:` in cpu_inference/__init__.py (each must be `X as X`)."""
    tree = ast.parse((PACKAGE / "__init__.py").read_text())
    blocks = [
        n for n in tree.body if isinstance(n, ast.If) and isinstance(n.test, ast.Name) and n.test.id == "TYPE_CHECKING"
    ]
    assert len(blocks) == 1
    out: dict[str, set[str]] = {}
    for node in blocks[0].body:
        assert isinstance(node, ast.ImportFrom) and node.level == 0, ast.dump(node)
        for alias in node.names:
            assert alias.asname == alias.name, (
                f"{alias.name}: write `{alias.name} as {alias.name}` (an explicit re-export)"
            )
            out.setdefault(str(node.module), set()).add(alias.name)
    return out


def test_every_public_name_resolves() -> None:
    missing = [name for name in cpu_inference.__all__ if getattr(cpu_inference, name, None) is None]
    assert missing == []


def test_type_checkers_see_exactly_the_lazy_exports() -> None:
    """The TYPE_CHECKING imports (what mypy/pyright read) and the lazy table (what runs) name the same things."""
    assert _type_checking_imports() == {m: set(names) for m, names in cpu_inference._LAZY.items()}


def test_lazy_exports_are_the_subpackages_own_objects() -> None:
    for module, names in cpu_inference._LAZY.items():
        sub = importlib.import_module(module, "cpu_inference")
        for name in names:
            assert getattr(cpu_inference, name) is getattr(sub, name), name
            assert name in sub.__all__, f"{name} is exported at the top but not by {module}"


def test_the_pool_farm_constructs_are_public() -> None:
    """Issue 13's constructs and the types their props need, importable from the package root."""
    wanted = {
        "ModelCatalog",
        "ModelCatalogProps",
        "CatalogEntry",
        "MultiModelEndpoint",
        "MultiModelEndpointProps",
        "TargetModel",
        "ModelPoolChart",
        "ModelPoolChartProps",
        "PoolModel",
        "MountpointS3Csi",
        "MountpointS3CsiProps",
        "MountpointSettings",
        "FarmPoolSettings",
    }
    assert wanted <= set(cpu_inference.__all__)


@pytest.mark.parametrize("sub", SUBPACKAGES)
def test_subpackage_exports_resolve(sub: str) -> None:
    mod = importlib.import_module(f"cpu_inference.{sub}")
    assert [n for n in mod.__all__ if getattr(mod, n, None) is None] == []


@pytest.mark.parametrize(
    ("sub", "internal"),
    [
        (
            "k8s",
            (
                "pack",
                "choose",
                "packing_table",
                "model_pod",
                "served_model_pods",
                "PackingPlan",
                "restricted_violations",
                "gateway_pool",
                "gateway_models",
                "render_preset",
                "queue_target",
            ),
        ),
        ("sagemaker", ("engine_settings", "prompt_cache_mib", "placement_slug", "default_target_concurrency")),
        ("artifacts", ("ModelCopyProvider",)),
    ],
)
def test_internals_are_not_exported(sub: str, internal: tuple[str, ...]) -> None:
    mod = importlib.import_module(f"cpu_inference.{sub}")
    # (a submodule of the same name, e.g. sagemaker.engine_settings, is an attribute once imported: not an export)
    assert [n for n in internal if n in mod.__all__ or not inspect.ismodule(getattr(mod, n, inspect))] == []


def test_the_testing_helpers_are_the_checks_the_old_paths_had() -> None:
    from cpu_inference import testing
    from cpu_inference.testing import crd_validation, pod_security

    assert testing.restricted_violations is pod_security.restricted_violations
    assert testing.validate is crd_validation.validate
    bad = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": {"name": "x"},
        "spec": {"template": {"spec": {"containers": [{"name": "c", "securityContext": {"privileged": True}}]}}},
    }
    assert testing.has_pod_spec(bad)
    assert any("privileged" in v for v in testing.restricted_violations(bad))


def test_import_does_not_start_jsii() -> None:
    code = (
        "import sys, cpu_inference, cpu_inference.testing; cpu_inference.load_config; cpu_inference.sizing;"
        f" dir(cpu_inference); print(sorted(m for m in {JSII!r} if m in sys.modules))"
    )
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert out.stdout.strip() == "[]"


def test_the_readme_lists_the_public_api() -> None:
    """The README's library section names every top-level export (and nothing that is not one)."""
    text = README.read_text()
    section = text[text.index("## Use it in your own CDK app") :]
    section = section[: section.index("\n## ", 1)]
    listed = set(re.findall(r"`(\w+)`", section[section.index("**Public API**") :].split("\n\n")[0]))
    assert listed == set(cpu_inference.__all__)
