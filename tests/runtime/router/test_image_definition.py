"""The router image definition: lint-clean, the engine's base digest, hash-pinned wheels, non-root."""

from __future__ import annotations

import ast
import re
import subprocess
import sys
from pathlib import Path

from tests.runtime.router.harness import ROUTER_DIR

DOCKERFILE = ROUTER_DIR / "Dockerfile"
ENGINE_DOCKERFILE = ROUTER_DIR.parent / "llama-server" / "Dockerfile"
BIN = Path(sys.executable).parent


def test_hadolint_clean() -> None:
    result = subprocess.run([str(BIN / "hadolint"), str(DOCKERFILE)], capture_output=True, text=True)
    assert result.returncode == 0, result.stdout + result.stderr


def test_same_base_digest_as_the_engine_image() -> None:
    froms = re.findall(r"^FROM (\S+)", DOCKERFILE.read_text(), re.M)
    engine_froms = set(re.findall(r"^FROM (\S+)", ENGINE_DOCKERFILE.read_text(), re.M))
    assert len(froms) == 2 and set(froms) == engine_froms and len(engine_froms) == 1
    assert re.fullmatch(r"[\w./-]+:[\w.-]+@sha256:[0-9a-f]{64}", froms[0])


def test_wheels_are_pinned_with_hashes_and_cover_every_third_party_import() -> None:
    lines = [ln for ln in (ROUTER_DIR / "requirements.txt").read_text().splitlines() if ln and not ln.startswith("#")]
    pins = {}
    for line in lines:
        m = re.fullmatch(r"([a-z0-9-]+)==(\S+) --hash=sha256:[0-9a-f]{64}", line)
        assert m, line
        pins[m.group(1)] = m.group(2)
    assert {"prometheus-client", "botocore", "jmespath", "python-dateutil", "six", "urllib3"} <= set(pins)
    # Every non-stdlib top-level import of the package is installed by requirements.txt.
    imported = set()
    for path in (ROUTER_DIR / "slm_router").glob("*.py"):
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Import):
                imported |= {a.name.split(".")[0] for a in node.names}
            elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
                imported.add(node.module.split(".")[0])
    third_party = imported - set(sys.stdlib_module_names) - {"__future__"}
    assert third_party == {"prometheus_client", "botocore"}
    assert "--require-hashes" in DOCKERFILE.read_text() and "--no-deps" in DOCKERFILE.read_text()


def test_runs_the_package_as_numeric_non_root() -> None:
    text = DOCKERFILE.read_text()
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and re.fullmatch(r"[1-9]\d*:[1-9]\d*", user[-1])
    assert "COPY slm_router/ /opt/router/app/slm_router/" in text
    assert 'ENTRYPOINT ["python3", "-m", "slm_router"]' in text
    assert "EXPOSE 8000" in text
    assert re.search(r"^ENV PYTHONPATH=/opt/router/app:/opt/router/lib", text, re.M)
