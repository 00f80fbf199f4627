"""The skip gate (tests/support/skip_gate.py) driven through its hooks with pytest's own report objects, shaped as
pytest makes them for a skip (longrepr = (path, line, "Skipped: reason")) and an xfail (`wasxfail`): a skip that is
not on the allowlist turns a passing session into a failed one and is named in the summary; an allowed one does not.
pytest's exit code is the session's exitstatus as it stands after pytest_sessionfinish, so `make test` fails too."""

from __future__ import annotations

import re
from types import SimpleNamespace

import pytest

from tests.support.skip_gate import ALLOWED, SkipGate

ALLOWED_REASON = "needs root: SageMaker starts the container as root"


def _report(nodeid: str, outcome: str, reason: str | None = None, xfail: str | None = None) -> pytest.TestReport:
    longrepr = (nodeid.split("::")[0], 1, f"Skipped: {reason}") if reason is not None else None
    report = pytest.TestReport(nodeid, (nodeid.split("::")[0], 0, nodeid), {}, outcome, longrepr, "call")
    if xfail is not None:
        report.wasxfail = xfail  # type: ignore[attr-defined]
    return report


class Terminal:
    def __init__(self) -> None:
        self.lines: list[str] = []

    def section(self, title: str, **_: object) -> None:
        self.lines.append(f"== {title}")

    def line(self, text: str) -> None:
        self.lines.append(text)


def _session_after(*reports: pytest.TestReport) -> tuple[SimpleNamespace, list[str]]:
    gate, session, terminal = SkipGate(), SimpleNamespace(exitstatus=pytest.ExitCode.OK), Terminal()
    for report in reports:
        gate.pytest_runtest_logreport(report)
    gate.pytest_sessionfinish(session)  # type: ignore[arg-type]
    gate.pytest_terminal_summary(terminal)
    return session, terminal.lines


def test_the_allowed_reason_is_on_the_allowlist() -> None:
    assert any(re.match(pattern, ALLOWED_REASON) for pattern in ALLOWED)


def test_an_unlisted_skip_or_xfail_fails_the_run_and_is_named() -> None:
    session, lines = _session_after(
        _report("t.py::test_runs", "passed"),
        _report("t.py::test_allowed", "skipped", ALLOWED_REASON),
        _report("t.py::test_unlisted", "skipped", "the cache file is not there"),
        _report("t.py::test_xfailed", "skipped", "known broken", xfail="known broken"),
    )
    assert session.exitstatus == pytest.ExitCode.TESTS_FAILED
    assert lines == [
        "== skips not on the allowlist (tests/support/skip_gate.py): the run fails",
        "SKIPPED t.py::test_unlisted: the cache file is not there",
        "SKIPPED t.py::test_xfailed: xfail: known broken",
    ]


def test_allowed_skips_pass() -> None:
    session, lines = _session_after(
        _report("t.py::test_runs", "passed"), _report("t.py::test_allowed", "skipped", ALLOWED_REASON)
    )
    assert session.exitstatus == pytest.ExitCode.OK and lines == []


def test_a_run_that_already_failed_keeps_its_own_exit_status() -> None:
    gate, session = SkipGate(), SimpleNamespace(exitstatus=pytest.ExitCode.INTERRUPTED)
    gate.pytest_runtest_logreport(_report("t.py::test_unlisted", "skipped", "no reason on the list"))
    gate.pytest_sessionfinish(session)  # type: ignore[arg-type]
    assert session.exitstatus == pytest.ExitCode.INTERRUPTED
