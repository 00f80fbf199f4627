"""The pin file parser: the repo's real pin reads cleanly; anything unsafe on a command line is refused."""

from __future__ import annotations

import pytest

from cpu_inference.images.engine_pin import check_build_arg, parse_pin
from tests.images.contexts import REAL_PIN


def test_the_repo_pin_reads_in_file_order(real_pin) -> None:
    assert list(real_pin) == ["LLAMA_CPP_PYTHON_VERSION", "LLAMA_CPP_PYTHON_SDIST", "LLAMA_CPP_PYTHON_SHA256"]
    assert real_pin["LLAMA_CPP_PYTHON_SDIST"] == f"llama_cpp_python-{real_pin['LLAMA_CPP_PYTHON_VERSION']}.tar.gz"
    assert len(real_pin["LLAMA_CPP_PYTHON_SHA256"]) == 64
    assert REAL_PIN.read_text().lstrip().startswith("#")  # comments are skipped, not parsed


def test_blank_lines_and_comments_are_skipped() -> None:
    assert parse_pin("\n# c\n  A=1  \n\nB=x.y-z:/@+=\n") == {"A": "1", "B": "x.y-z:/@+="}


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("A=1\nNOEQUALS\n", r"pin:2: expected KEY=VALUE, got 'NOEQUALS'"),
        ("lower=1\n", r"pin:1: key 'lower' must match"),
        ("A=$(reboot)\n", r"pin:1: value of A has characters outside"),
        ('A="quoted"\n', r"pin:1: value of A has characters outside"),
        ("A=two words\n", r"pin:1: value of A has characters outside"),
        ("A=1\nA=2\n", r"pin:2: A is set twice"),
    ],
)
def test_unsafe_or_malformed_lines_name_file_and_line(text: str, message: str) -> None:
    with pytest.raises(ValueError, match=message):
        parse_pin(text, "pin")


def test_build_args_follow_the_same_rules() -> None:
    check_build_arg("GGML_NATIVE", "OFF")
    with pytest.raises(ValueError, match=r"build_args.X: value of X has characters outside"):
        check_build_arg("X", "a;b", "build_args.X")
