"""No silent skips: a test run fails when a test is skipped (or xfailed) for a reason not on ALLOWED below.

A check that silently does not run is not a check: what a test needs is made by the steps `make test` runs, and a
parametrization that does not apply is not generated. The few skips that remain are allowed here, each with why.
Loaded for every run by tests/conftest.py, so `make test` and `.ci/run` fail alike; the summary lists each skip."""

from __future__ import annotations

import re

import pytest

# reason (a regular expression matched from the start of pytest's skip reason) -> why it may skip.
ALLOWED: dict[str, str] = {
    r"needs root: SageMaker starts the container as root": (
        "the root-to-65532 drop can only be exercised as root; CI and the dev machines run as root, so it runs there"
    ),
    r"the drop happens only when started as root \(SageMaker's way\)": (
        "the vLLM image's root drop, likewise: runs wherever the suite runs as root (CI does)"
    ),
}
_ALLOWED = [re.compile(pattern) for pattern in ALLOWED]


def _reason(report: pytest.TestReport) -> str:
    if hasattr(report, "wasxfail"):
        return f"xfail: {report.wasxfail}"
    longrepr = report.longrepr
    if isinstance(longrepr, tuple) and len(longrepr) == 3:
        return str(longrepr[2]).removeprefix("Skipped: ")
    return str(longrepr)


class SkipGate:
    def __init__(self) -> None:
        self.unexpected: list[tuple[str, str]] = []

    @pytest.hookimpl
    def pytest_runtest_logreport(self, report: pytest.TestReport) -> None:
        if report.skipped or hasattr(report, "wasxfail"):
            reason = _reason(report)
            if not any(p.match(reason) for p in _ALLOWED):
                self.unexpected.append((report.nodeid, reason))

    @pytest.hookimpl(trylast=True)
    def pytest_sessionfinish(self, session: pytest.Session) -> None:
        if self.unexpected and session.exitstatus in (pytest.ExitCode.OK, pytest.ExitCode.NO_TESTS_COLLECTED):
            session.exitstatus = pytest.ExitCode.TESTS_FAILED

    @pytest.hookimpl
    def pytest_terminal_summary(self, terminalreporter) -> None:  # type: ignore[no-untyped-def]
        if not self.unexpected:
            return
        terminalreporter.section("skips not on the allowlist (tests/support/skip_gate.py): the run fails", red=True)
        for nodeid, reason in self.unexpected:
            terminalreporter.line(f"SKIPPED {nodeid}: {reason}")


def pytest_configure(config: pytest.Config) -> None:
    config.pluginmanager.register(SkipGate(), "skip-gate")
