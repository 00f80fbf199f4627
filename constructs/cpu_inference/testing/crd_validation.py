"""Validate rendered Karpenter/KEDA objects against the CRDs of the pinned charts — offline, reproducible.

Fetch the CRDs once into a cache (needs network and helm), then validate any synthesized template:

    helm pull oci://public.ecr.aws/karpenter/karpenter-crd --version 1.14.1 --untar -d ~/.cache/cpu-inference/crds
    helm pull keda --repo https://kedacore.github.io/charts --version 2.20.2 --untar -d ~/.cache/cpu-inference/crds
    CRDS=~/.cache/cpu-inference/crds
    python -m cpu_inference.testing --crds $CRDS --template cdk.out/Stack.template.json

Each object is checked against its CRD's openAPIV3Schema (jsonschema) and then, as the API server does,
against the CRD's CEL rules (`x-kubernetes-validations`, evaluated by crd_cel.py after schema defaulting;
transition rules need an old object, so on this create-style check they are skipped as on a create).
`--dump DIR` also writes every object as YAML for a live-cluster check: `kubectl apply --dry-run=server -f DIR`.

Needs `jsonschema` and `cel-expr-python` (the `dev` extra). CloudFormation intrinsics inside manifests are
replaced by the placeholder "TOKEN" before validation. Was cpu_inference.testing.crd_validation (that path still works).
"""

from __future__ import annotations

import argparse
import json
import sys
from collections.abc import Callable, Iterable, Iterator
from pathlib import Path
from typing import Any

import yaml

TOKEN = "TOKEN"
MANIFEST_TYPE = "Custom::AWSCDK-EKS-KubernetesResource"
CUSTOM_GROUPS = ("karpenter.sh", "karpenter.k8s.aws", "keda.sh")


def _yaml_docs(path: Path) -> Iterator[Any]:
    text = path.read_text()
    try:
        yield from yaml.safe_load_all(text)
    except yaml.YAMLError:
        # Chart templates may carry {{ }} lines (e.g. conditional annotations); the schema never does.
        yield from yaml.safe_load_all("\n".join(line for line in text.splitlines() if "{{" not in line))


def load_schemas(dirs: Iterable[Path]) -> dict[tuple[str, str], dict[str, Any]]:
    """(apiVersion, kind) -> openAPIV3Schema for every CRD in YAML files under `dirs` (recursively)."""
    out: dict[tuple[str, str], dict[str, Any]] = {}
    for d in dirs:
        for f in sorted(Path(d).rglob("*.y*ml")):
            try:
                docs = list(_yaml_docs(f))
            except yaml.YAMLError:
                continue
            for doc in docs:
                if not isinstance(doc, dict) or doc.get("kind") != "CustomResourceDefinition":
                    continue
                spec = doc.get("spec", {})
                for v in spec.get("versions", []):
                    schema = (v.get("schema") or {}).get("openAPIV3Schema")
                    if schema:
                        out[(f"{spec['group']}/{v['name']}", spec["names"]["kind"])] = schema
    return out


def validate(obj: dict[str, Any], schemas: dict[tuple[str, str], dict[str, Any]]) -> list[str]:
    """Problems with one object ([] when valid, or a 'no CRD' problem when its kind is unknown)."""
    import jsonschema

    key = (obj.get("apiVersion", ""), obj.get("kind", ""))
    name = obj.get("metadata", {}).get("name")
    if key not in schemas:
        return [f"{key[1]}/{name}: no CRD for {key[0]} {key[1]}"]
    from cpu_inference.testing.crd_cel import BLOCKING_KEYWORDS, validate_rules

    errors = list(jsonschema.Draft7Validator(schemas[key]).iter_errors(obj))
    problems = [f"{key[1]}/{name}: {'/'.join(map(str, e.path)) or '<root>'}: {e.message}" for e in errors]
    if any(e.validator in BLOCKING_KEYWORDS for e in errors):
        return problems  # the API server runs no CEL rule on an object with these errors (it is rejected already)
    return problems + [f"{key[1]}/{name}: {p}" for p in validate_rules(obj, schemas[key])]


def flatten(value: Any, token: Callable[[Any], str] = lambda _: TOKEN) -> str:
    """A CloudFormation string expression (a literal or an Fn::Join) with every other intrinsic replaced by
    `token(intrinsic)` (default: the placeholder TOKEN)."""
    if isinstance(value, str):
        return value
    if isinstance(value, dict) and "Fn::Join" in value:
        sep, parts = value["Fn::Join"]
        return str(sep).join(flatten(p, token) for p in parts)
    return token(value)


def template_objects(template: dict[str, Any]) -> list[dict[str, Any]]:
    """Every object of every KubernetesManifest resource in a synthesized CloudFormation template."""
    objs: list[dict[str, Any]] = []
    for res in template.get("Resources", {}).values():
        if res.get("Type") == MANIFEST_TYPE:
            objs.extend(json.loads(flatten(res["Properties"]["Manifest"])))
    return objs


def is_custom(obj: dict[str, Any]) -> bool:
    return obj.get("apiVersion", "").split("/")[0] in CUSTOM_GROUPS


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m cpu_inference.testing", description=__doc__.splitlines()[0])
    p.add_argument(
        "--crds",
        action="append",
        required=True,
        type=Path,
        help="directory of CRD YAML (repeatable; searched recursively)",
    )
    p.add_argument(
        "--template", action="append", default=[], type=Path, help="synthesized CloudFormation template (JSON)"
    )
    p.add_argument("manifests", nargs="*", type=Path, help="YAML/JSON files of Kubernetes objects")
    p.add_argument("--dump", type=Path, help="also write each object as YAML here (for kubectl apply --dry-run=server)")
    args = p.parse_args(argv)
    missing = [str(d) for d in args.crds if not d.is_dir()]
    if missing:
        print(
            f"error: CRD directory not found: {', '.join(missing)} (see the helm pull commands in this module's docstring)",
            file=sys.stderr,
        )
        return 2
    schemas = load_schemas(args.crds)
    objs: list[dict[str, Any]] = []
    for t in args.template:
        objs.extend(template_objects(json.loads(t.read_text())))
    for m in args.manifests:
        objs.extend(d for d in _yaml_docs(m) if isinstance(d, dict))
    custom = [o for o in objs if is_custom(o)]
    try:
        problems = [msg for o in custom for msg in validate(o, schemas)]
    except ImportError as exc:  # the CEL engine is missing: fail rather than skip the rules
        print(f"error: {exc}", file=sys.stderr)
        return 2
    if args.dump:
        args.dump.mkdir(parents=True, exist_ok=True)
        for i, o in enumerate(objs):
            (
                args.dump / f"{i:03d}-{o.get('kind', 'object').lower()}-{o.get('metadata', {}).get('name', i)}.yaml"
            ).write_text(yaml.safe_dump(o, sort_keys=False))
    for msg in problems:
        print(msg)
    print(f"{len(custom)} custom objects checked against {len(schemas)} CRD versions: {len(problems)} problems")
    return 1 if problems else 0


if __name__ == "__main__":
    sys.exit(main())
