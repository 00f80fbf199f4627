"""Layers point down only: config/sizing → k8s specs → artifacts/images → eks/sagemaker → patterns → app/cli, and the
runtime code (containers/, lambda/) never imports the library or a jsii library.

Imports are read with `ast` (every `import` statement, also those inside functions and under TYPE_CHECKING: a
type-only back-reference is still a back-reference), so the test needs no jsii and no import side effects.
`python tests/test_layering.py` prints the import graph between the package's subpackages."""

from __future__ import annotations

import ast
import sys
from collections.abc import Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGE = ROOT / "constructs" / "cpu_inference"
RUNTIME_TREES = (ROOT / "containers", ROOT / "lambda")

# The layers, lowest first. A unit (a top-level module or subpackage of cpu_inference) may import units of LOWER
# tiers only: never its own tier (eks ↛ sagemaker), never a higher one.
TIERS: tuple[tuple[str, ...], ...] = (
    # Private internals, each a unit of its own (imported as cpu_inference._internal.<module>): jsii's Node, the
    # runtime files, names AWS gives a meaning to, a Kubernetes object's identity and needs, CDK tokens in text.
    ("_internal.jsii_node", "_internal.resources", "_internal.aws_names", "_internal.k8s_object", "_internal.tokens"),
    ("engines",),  # stdlib only: each engine's facts (flags, env, metrics, the tasks it serves, the pool preset)
    ("sizing",),  # stdlib only: the instance catalog, the per-model sizing, pool sizing, the SLM's context budget
    # Checks of rendered objects (dicts in, problems out): they depend on nothing of the library above them.
    ("testing",),
    ("evaluation",),  # bench/eval tools on top of the engines' facts
    ("config",),  # config.yaml: schema, loader, decision rules
    (
        "k8s",
        "_internal.nag",
    ),  # typed Kubernetes specs, workload builders, cdk8s charts; cdk-nag acknowledgments (aws_cdk)
    ("monitoring",),  # alert and alarm rules (Prometheus rule groups, the latency/cold-load thresholds)
    ("artifacts", "images"),  # the S3 model store and the engine image
    ("eks", "sagemaker"),  # the two targets
    ("patterns",),  # SlmPrefilter, ModelFarm: compose everything below
    ("__init__",),  # the package facade: re-exports the public API
    ("app", "cli"),  # entry points: nothing in the library imports them
)
# Runtime packages the library may import from any tier (plain Python, no aws_cdk): the router's config contract
# and budget, the model-download job's shared pieces.
RUNTIME_PACKAGES = frozenset({"inference_runtime", "slm_router", "model_download"})
# What the runtime code must never import: the library, or anything that starts jsii.
FORBIDDEN_IN_RUNTIME = frozenset(
    {"cpu_inference", "aws_cdk", "constructs", "cdk8s", "cdk8s_plus_27", "jsii", "cdk_nag"}
)
# The pure tiers (and the CLI's pure commands, which import them) never start jsii.
PURE_UNITS = frozenset(
    {
        "_internal.jsii_node",
        "_internal.resources",
        "_internal.aws_names",
        "_internal.k8s_object",
        "_internal.tokens",
        "engines",
        "sizing",
        "testing",
        "evaluation",
        "config",
    }
)
# Private internals: a package of unrelated helpers, so each module is its own unit.
INTERNAL = "_internal"
# The CLI commands that are the face of a checker in cpu_inference.testing (`cpu-inference plan` runs the rehearsal).
TESTING_COMMANDS = frozenset({"cli/plan_cmd.py"})
JSII_LIBRARIES = FORBIDDEN_IN_RUNTIME - {"cpu_inference"}
TIER_OF = {unit: i for i, units in enumerate(TIERS) for unit in units}


def _module_name(path: Path, root: Path, package: str) -> tuple[str, ...]:
    parts = path.relative_to(root).with_suffix("").parts
    return (package, *(parts[:-1] if parts[-1] == "__init__" else parts))


def imported_modules(path: Path, module: tuple[str, ...]) -> Iterator[tuple[int, str]]:
    """(line, absolute dotted name) of every import in the file, relative imports resolved."""
    is_package = path.name == "__init__.py"
    for node in ast.walk(ast.parse(path.read_text(), filename=str(path))):
        if isinstance(node, ast.Import):
            for alias in node.names:
                yield node.lineno, alias.name
        elif isinstance(node, ast.ImportFrom):
            if not node.level:  # each name may be a submodule (`from cpu_inference._internal import nag`)
                for alias in node.names:
                    yield node.lineno, f"{node.module}.{alias.name}"
                continue
            base = list(module if is_package else module[:-1])
            base = base[: len(base) - (node.level - 1)]
            if node.module:
                yield node.lineno, ".".join([*base, node.module])
            else:  # `from .. import sizing`: each name may be a submodule
                for alias in node.names:
                    yield node.lineno, ".".join([*base, alias.name])


def units() -> set[str]:
    top = {
        p.stem if p.suffix == ".py" else p.name
        for p in PACKAGE.iterdir()
        if (p.suffix == ".py" or (p / "__init__.py").exists()) and p.name != "__pycache__"
    }
    internal = {f"{INTERNAL}.{p.stem}" for p in (PACKAGE / INTERNAL).glob("*.py") if p.stem != "__init__"}
    return (top - {INTERNAL}) | internal


def _unit(parts: list[str] | tuple[str, ...]) -> str:
    """The unit of a module path below cpu_inference: its top-level name, or `_internal.<module>`."""
    return f"{INTERNAL}.{parts[1]}" if parts[0] == INTERNAL and len(parts) > 1 else parts[0]


def unit_of(dotted: str, known: set[str]) -> str | None:
    """The cpu_inference unit a dotted name lands in (`__init__` for attributes of the package itself, e.g.
    `cpu_inference.__version__`), a runtime package name, or None for anything else."""
    parts = dotted.split(".")
    if parts[0] in RUNTIME_PACKAGES:
        return parts[0]
    if parts[0] != "cpu_inference":
        return None
    if len(parts) == 1 or parts[1] == "__init__" or _unit(parts[1:]) not in known:
        return "__init__"
    return _unit(parts[1:])


def import_edges() -> dict[tuple[str, str], list[str]]:
    """(importer unit, imported unit) → where ("file:line"), for every import between different units."""
    known = units()
    edges: dict[tuple[str, str], list[str]] = {}
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path, PACKAGE, "cpu_inference")
        src = _unit(module[1:]) if len(module) > 1 else "__init__"
        for line, dotted in imported_modules(path, module):
            dst = unit_of(dotted, known)
            if dst is not None and dst != src:
                edges.setdefault((src, dst), []).append(f"{path.relative_to(ROOT)}:{line}")
    return edges


def graph_text(edges: dict[tuple[str, str], list[str]]) -> str:
    by_src: dict[str, set[str]] = {}
    for src, dst in edges:
        by_src.setdefault(src, set()).add(dst)
    return "\n".join(
        f"{src:12} -> {', '.join(sorted(by_src[src]))}" for src in sorted(by_src, key=lambda u: (TIER_OF.get(u, -1), u))
    )


def test_every_unit_has_a_tier() -> None:
    """A new subpackage must be placed in TIERS (deciding its layer is part of adding it)."""
    assert sorted(units() - set(TIER_OF) - {"__main__"}) == []


def test_layers_point_down_only() -> None:
    edges = import_edges()
    print("\nimport graph between cpu_inference units (importer -> imported):\n" + graph_text(edges))
    upward = [
        f"{src} (tier {TIER_OF[src]}) imports {dst} (tier {TIER_OF[dst]}) at {', '.join(where)}"
        for (src, dst), where in sorted(edges.items())
        if dst not in RUNTIME_PACKAGES and TIER_OF[dst] >= TIER_OF[src]
    ]
    assert upward == []


def test_pure_units_never_import_a_jsii_library() -> None:
    """config, sizing and the evaluation tools run in the CLI's pure commands, which must not start jsii."""
    bad = []
    for path in sorted(PACKAGE.rglob("*.py")):
        module = _module_name(path, PACKAGE, "cpu_inference")
        if len(module) > 1 and _unit(module[1:]) in PURE_UNITS:
            bad += [
                f"{path.relative_to(ROOT)}:{line} {dotted}"
                for line, dotted in imported_modules(path, module)
                if dotted.split(".")[0] in JSII_LIBRARIES
            ]
    assert bad == []


def test_construct_code_never_imports_the_test_helpers() -> None:
    """cpu_inference.testing is for tests (ours and users'): what the constructs render never depends on it."""
    users = sorted(
        str(path.relative_to(PACKAGE))
        for path in PACKAGE.rglob("*.py")
        if path.relative_to(PACKAGE).parts[0] != "testing"
        and any(
            unit_of(d, units()) == "testing"
            for _, d in imported_modules(path, _module_name(path, PACKAGE, "cpu_inference"))
        )
    )
    assert set(users) <= TESTING_COMMANDS, users


def test_no_module_only_re_exports() -> None:
    """No compatibility shims: every module below a package facade defines something (a module whose body is a
    docstring and imports only keeps an old import path alive), and names are imported from the module that
    defines them (`import X as X` marks a re-export; only package facades, `__init__.py`, re-export)."""
    shims, marked = [], []
    for path in sorted(PACKAGE.rglob("*.py")):
        if path.name in ("__init__.py", "__main__.py"):
            continue
        tree = ast.parse(path.read_text())
        if all(isinstance(n, (ast.Expr, ast.Import, ast.ImportFrom)) for n in tree.body):
            shims.append(str(path.relative_to(PACKAGE)))
        marked += [
            f"{path.relative_to(PACKAGE)}:{n.lineno} {a.name}"
            for n in ast.walk(tree)
            if isinstance(n, ast.ImportFrom)
            for a in n.names
            if a.asname == a.name
        ]
    assert (shims, marked) == ([], [])


def test_runtime_code_never_imports_the_library_or_jsii() -> None:
    files = [p for tree in RUNTIME_TREES for p in sorted(tree.rglob("*.py")) if "__pycache__" not in p.parts]
    assert len(files) > 20  # the trees are where this test thinks they are
    bad = [
        f"{path.relative_to(ROOT)}:{line} {dotted}"
        for path in files
        for line, dotted in imported_modules(path, _module_name(path, path.parent, path.parent.name))
        if dotted.split(".")[0] in FORBIDDEN_IN_RUNTIME
    ]
    assert bad == []


def test_the_checker_sees_a_back_reference(tmp_path: Path) -> None:
    """The parser resolves relative imports the way Python does: a back-reference written like today's code is
    found, so an empty result above means something."""
    pkg = tmp_path / "cpu_inference" / "sagemaker"
    pkg.mkdir(parents=True)
    f = pkg / "props.py"
    f.write_text("from ..patterns.served_model import ServedModel\nfrom .. import sizing\nfrom . import engine\n")
    got = [d for _, d in imported_modules(f, ("cpu_inference", "sagemaker", "props"))]
    assert got == ["cpu_inference.patterns.served_model", "cpu_inference.sizing", "cpu_inference.sagemaker.engine"]
    known = {"patterns", "sizing", "sagemaker"}
    assert [unit_of(d, known) for d in got] == ["patterns", "sizing", "sagemaker"]
    assert TIER_OF["patterns"] > TIER_OF["sagemaker"]


def test_the_readme_lists_every_layer_in_order() -> None:
    """The README's package picture (between the `layers` markers) is TIERS: one row per tier, lowest first, each
    naming exactly that tier's units at its start, so the picture cannot drift from what this test enforces."""
    text = (ROOT / "README.md").read_text()
    block = text.split("<!-- BEGIN layers -->", 1)[1].split("<!-- END layers -->", 1)[0]
    rows = [
        line.split("  ", 1)[0].split()
        for line in block.strip().strip("`").splitlines()
        if line and not line[0].isspace()
    ]
    assert [tuple(r) for r in rows] == list(TIERS)


if __name__ == "__main__":
    sys.stdout.write(graph_text(import_edges()) + "\n")
