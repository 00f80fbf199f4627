"""The skip gate (tests/support/skip_gate.py) on a real pytest run: a skip that is not on the allowlist fails the
run and is named in the summary; an allowed one does not."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

TESTS = '''
import pytest

def test_runs():
    assert True

@pytest.mark.skipif(True, reason="needs root: SageMaker starts the container as root")
def test_allowed():
    pass

def test_unlisted():
    pytest.skip("the cache file is not there")

@pytest.mark.xfail(reason="known broken")
def test_xfailed():
    assert False
'''


def _run(tmp_path: Path, *select: str) -> subprocess.CompletedProcess[str]:
    (tmp_path / "test_sample.py").write_text(TESTS)
    return subprocess.run([sys.executable, "-m", "pytest", "-p", "tests.support.skip_gate", "-q", "-p", "no:cacheprovider",
                           "--rootdir", str(tmp_path), "-c", "/dev/null", *(f"test_sample.py::{t}" for t in select)],
                          cwd=tmp_path, env={"PYTHONPATH": str(ROOT), "PATH": "/usr/bin:/bin"}, capture_output=True, text=True)


def test_an_unlisted_skip_or_xfail_fails_the_run_and_is_named(tmp_path: Path) -> None:
    out = _run(tmp_path, "test_runs", "test_allowed", "test_unlisted", "test_xfailed")
    assert out.returncode == 1, out.stdout + out.stderr
    assert "skips not on the allowlist" in out.stdout
    assert "SKIPPED test_sample.py::test_unlisted: the cache file is not there" in out.stdout
    assert "SKIPPED test_sample.py::test_xfailed: xfail: known broken" in out.stdout
    assert "test_allowed" not in out.stdout.split("skips not on the allowlist")[1]


def test_allowed_skips_pass(tmp_path: Path) -> None:
    out = _run(tmp_path, "test_runs", "test_allowed")
    assert out.returncode == 0, out.stdout + out.stderr
    assert "1 passed, 1 skipped" in out.stdout and "skips not on the allowlist" not in out.stdout
