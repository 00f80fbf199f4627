"""Build hook only (metadata lives in pyproject.toml): wheels carry the runtime trees (containers/, lambda/) as
package data under cpu_inference/_bundled/. Why this way, and how the library finds them: see
constructs/cpu_inference/_internal/resources.py, whose list and copy this file reuses."""

from __future__ import annotations

import importlib.util
from pathlib import Path

from setuptools import setup
from setuptools.command.build_py import build_py

HERE = Path(__file__).resolve().parent


def _resources():
    # Loaded by path: importing the package would import its dependencies, which a build does not have.
    spec = importlib.util.spec_from_file_location(
        "_cpu_inference_resources", HERE / "constructs" / "cpu_inference" / "_internal" / "resources.py"
    )
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class BuildPyWithRuntime(build_py):
    """build_py, then the runtime trees into <build_lib>/cpu_inference/_bundled (not for editable installs,
    which read them from the checkout)."""

    def run(self) -> None:
        super().run()
        if not self.editable_mode:
            _resources().copy_runtime_dirs(HERE, Path(self.build_lib) / "cpu_inference")

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        outputs = super().get_outputs(include_bytecode)
        if self.editable_mode:
            return outputs
        resources = _resources()
        bundled = Path(self.build_lib) / "cpu_inference" / resources.BUNDLED
        return outputs + [str(bundled / relative) for relative in resources.runtime_files(HERE)]


setup(cmdclass={"build_py": BuildPyWithRuntime})
