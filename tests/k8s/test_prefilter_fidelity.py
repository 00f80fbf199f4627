"""Pattern 1 as deployed pre-filters: the shipped configs' SLM, started from exactly what they render, classifies a
2,000-character request (the router's classify_max_chars) and answers a simple one with room to spare.

EKS (config.yaml): the SLM Deployment's engine container (command + env, from the synthesized manifests) runs
through containers/llama-server/entrypoint.py, and the router (`python -m slm_router`, the image's command) reads
the ConfigMap the router chart rendered. SageMaker (examples/slm-prefilter-sagemaker.yaml): the SLM endpoint's
container environment runs the entrypoint's `serve` (SageMaker mode, /invocations), and the router endpoint's
ROUTER_CONFIG_JSON is what the router's own classifier builds the request from. The stand-in SmolLM2-135M shares
SmolLM2-1.7B's tokenizer, so every token count here is the deployed model's.

Changed for this machine only: the model file (stand-in), threads (1), ports and URLs (loopback, the Bedrock and
SageMaker Runtime calls at a loopback stand-in), the classification timeout (a shared 2-core box), and the
SageMaker container's run-as user (root here: the stand-in model lives under /root); never the slots or the
context per slot. With the old sizing (512 tokens per classification slot) the engine refused the 2,000-character
classification ("exceeds the available context size"), and the router escalated every long request.
"""

from __future__ import annotations

import json
import os
import shlex
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest

from tests.runtime.router.aws_standin import AwsStandIn
from tests.runtime.router.harness import ROUTER_DIR, metric, running_router
from tests.support.engine import free_port, llama_server, stop_process, wait_healthy
from tests.support.rendered import engine_container, router_config_map, sagemaker_environments
from tests.support.texts import COVERED, GREEK, NOT_COVERED, repeated

pytestmark = pytest.mark.engine

ROOT = Path(__file__).resolve().parents[2]
ENTRYPOINT = ROOT / "containers" / "llama-server" / "entrypoint.py"
EKS_CONFIG, SM_CONFIG, SLM = "config.yaml", "examples/slm-prefilter-sagemaker.yaml", "smollm2-1-7b"
THREAD_KEYS = ("LLAMA_THREADS", "OMP_NUM_THREADS", "MKL_NUM_THREADS", "OPENBLAS_NUM_THREADS", "INTRA_OP_NUM_THREADS")
AWS_ENV = {"AWS_ACCESS_KEY_ID": "testing", "AWS_SECRET_ACCESS_KEY": "testing", "AWS_EC2_METADATA_DISABLED": "true"}
# Greek is the covered script with the fewest characters per token (slm_router/budget.py): the hardest
# 2,000-character request the budget promises to hold.
LONG_REQUEST = repeated(GREEK, 2000)

if str(ROUTER_DIR) not in sys.path:
    sys.path.insert(0, str(ROUTER_DIR))
from slm_router import budget  # noqa: E402
from slm_router.classifier import FULL_LABEL_TOKENS, Classifier, request_text  # noqa: E402
from slm_router.config import load as load_router_config  # noqa: E402


def engine_env(rendered: dict[str, str], binary: Path, model: Path) -> dict[str, str]:
    """The rendered environment with only the machine-specific values swapped (see the module docstring)."""
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LLAMA_", "MODEL_", "SAGEMAKER_", "SM_"))}
    env.update(rendered)
    env.update({k: "1" for k in THREAD_KEYS}, MODEL_PATH=str(model), LLAMA_SERVER_BIN=str(binary), LLAMA_ARG_REPACK="0")
    return env


def print_command(env: dict[str, str], *mode: str) -> list[str]:
    out = subprocess.run(
        [sys.executable, str(ENTRYPOINT), "print-command", *mode], env=env, capture_output=True, text=True, timeout=60
    )
    assert out.returncode == 0, out.stderr
    return shlex.split(out.stdout)


def flag(argv: list[str], name: str) -> str:
    return argv[argv.index(name) + 1]


class Engine:
    def __init__(self, env: dict[str, str], url: str, log: Path, *mode: str):
        self.url, self.log = url, log
        with open(log, "wb") as out:
            self.proc = subprocess.Popen(
                [sys.executable, str(ENTRYPOINT), *mode], env=env, stdout=out, stderr=subprocess.STDOUT
            )
        try:
            wait_healthy(url, self.proc, timeout=180) if not mode else self._wait_ping()
        except BaseException:
            self.stop()
            raise

    def _wait_ping(self) -> None:
        deadline = time.monotonic() + 180
        while time.monotonic() < deadline:
            assert self.proc.poll() is None, self.log.read_text(errors="replace")[-2000:]
            try:
                if httpx.get(f"{self.url}/ping", timeout=2).status_code == 200:
                    return
            except httpx.TransportError:
                pass
            time.sleep(0.3)
        raise TimeoutError(f"SageMaker-mode engine not ready:\n{self.log.read_text(errors='replace')[-2000:]}")

    def stop(self) -> None:
        stop_process(self.proc, timeout=20)

    def refused_context(self) -> bool:
        return "exceeds the available context size" in self.log.read_text(errors="replace")


# --- EKS: config.yaml ------------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def eks_engine(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory
) -> Iterator[tuple[Engine, dict[str, str], list[str]]]:
    c = engine_container(EKS_CONFIG, SLM)
    rendered = {e["name"]: e["value"] for e in c["env"]}
    port = free_port()
    env = engine_env(rendered, llama_server_bin, smollm2_gguf)
    env.update(LLAMA_HOST="127.0.0.1", LLAMA_PORT=str(port))
    assert c["command"] == ["python3", "/opt/llama/entrypoint.py"] and not c.get("args")  # EKS mode: no argument
    argv = print_command(env)
    engine = Engine(env, f"http://127.0.0.1:{port}", tmp_path_factory.mktemp("eks-slm") / "engine.log")
    try:
        yield engine, rendered, argv
    finally:
        engine.stop()


def test_eks_slm_runs_with_the_rendered_slots_and_context(eks_engine) -> None:
    engine, rendered, argv = eks_engine
    slots, per_slot = int(rendered["LLAMA_PARALLEL"]), int(rendered["LLAMA_CTX_PER_SLOT"])
    assert (flag(argv, "--parallel"), flag(argv, "--ctx-size")) == (str(slots), str(slots * per_slot))
    assert Path(f"/proc/{engine.proc.pid}/cmdline").read_bytes().split(b"\0")[:-1] == [a.encode() for a in argv]
    # What the router's own budget says a slot must hold for the config the router chart rendered.
    assert per_slot >= budget.budget_for(router_config_map(EKS_CONFIG)).context_per_slot


def test_budget_chars_per_token_holds_for_the_slm_tokenizer(eks_engine) -> None:
    """CHARS_PER_TOKEN against the SLM's real tokenizer: a lower bound for every covered script, and the
    scripts it does not cover are below it (so the docstring's trade-off is the measured one)."""
    engine, _, _ = eks_engine
    ratios = {}
    for name, text in {**COVERED, **NOT_COVERED}.items():
        tokens = httpx.post(f"{engine.url}/tokenize", json={"content": text}, timeout=60).json()["tokens"]
        ratios[name] = len(text) / len(tokens)
    low = {n: r for n, r in ratios.items() if n in COVERED and r < budget.CHARS_PER_TOKEN}
    assert not low, f"covered scripts below {budget.CHARS_PER_TOKEN} characters per token: {ratios}"
    assert all(ratios[n] < budget.CHARS_PER_TOKEN for n in NOT_COVERED), ratios


@pytest.fixture(scope="module")
def llm_engine(llama_server_bin: Path, smollm2_gguf: Path) -> Iterator[str]:
    """The escalation target's stand-in (config.yaml escalates to Bedrock): room for any request of these tests."""
    with llama_server(
        llama_server_bin, smollm2_gguf, "-np", "1", "-c", "8192", "-t", "1", "--alias", "llm-stand-in"
    ) as url:
        yield url


@pytest.fixture(scope="module")
def eks_router(eks_engine, llm_engine, tmp_path_factory) -> Iterator[Any]:
    rendered = router_config_map(EKS_CONFIG)
    standin = AwsStandIn(llm_engine).start()  # Bedrock Runtime on loopback, answering with the stand-in LLM
    cfg = json.loads(json.dumps(rendered))
    cfg.update(slm_url=eks_engine[0].url, listen_host="127.0.0.1", listen_port=free_port())
    cfg["escalation"].update(region="us-east-1", endpoint_url=standin.url)
    cfg["timeouts"] = {"classify_s": 120, "first_byte_s": 300, "total_s": 600}
    changed = {k for k in set(cfg) | set(rendered) if cfg.get(k) != rendered.get(k)}
    assert changed <= {"slm_url", "listen_host", "listen_port", "escalation", "timeouts"}, changed
    try:
        with running_router(cfg, tmp_path_factory.mktemp("eks-router"), env=AWS_ENV) as r:
            yield r
    finally:
        standin.stop()


def test_eks_router_classifies_a_2000_character_request_with_the_slm(eks_engine, eks_router) -> None:
    engine, _, _ = eks_engine
    r = httpx.post(
        f"{eks_router.url}/v1/chat/completions",
        timeout=600,
        json={"messages": [{"role": "user", "content": LONG_REQUEST}], "max_tokens": 4, "temperature": 0},
    )
    assert r.status_code == 200, r.text
    assert "x-router-label" in r.headers, (
        f"not classified by the SLM (route {r.headers.get('x-router-route')}):\n{eks_router.log_tail()}"
    )
    assert metric(eks_router.url, "router_classification_errors_total", reason="unusable-answer") == 0
    # Whole: not cut down to fit a slot too small for it (the router's fallback for scripts denser than the budget).
    assert "classifying a shorter head and tail" not in eks_router.log.read_text(errors="replace")
    assert not engine.refused_context()


def test_eks_router_answers_a_simple_request_with_the_slm(eks_router) -> None:
    r = httpx.post(
        f"{eks_router.url}/v1/chat/completions",
        timeout=600,
        json={"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "temperature": 0},
    )
    assert r.status_code == 200, r.text
    assert (r.headers["x-router-route"], r.headers["x-router-label"]) == ("slm", "simple"), dict(r.headers)
    assert r.json()["choices"][0]["message"]["content"].strip()


def test_eks_slm_has_room_to_answer_the_longest_simple_request(eks_engine) -> None:
    """A request of classify_max_chars in the hardest covered script, answered with answer_max_tokens (the
    engine may not stop early: ignore_eos), fits one slot."""
    engine, _, _ = eks_engine
    from cpu_inference.config import load

    answer = load(ROOT / EKS_CONFIG).router.answer_max_tokens
    r = httpx.post(
        f"{engine.url}/v1/chat/completions",
        timeout=900,
        json={
            "messages": [{"role": "user", "content": LONG_REQUEST}],
            "max_tokens": answer,
            "ignore_eos": True,
            "temperature": 0,
        },
    )
    assert r.status_code == 200, r.text
    usage = r.json()["usage"]
    assert usage["completion_tokens"] == answer
    assert usage["prompt_tokens"] + answer <= budget.budget_for(router_config_map(EKS_CONFIG), answer).answer_tokens


# --- SageMaker: examples/slm-prefilter-sagemaker.yaml ----------------------------------------------------


def _sm_env(key: str, value_test) -> dict[str, str]:
    found = [env for env in sagemaker_environments(SM_CONFIG) if key in env and value_test(env[key])]
    assert len(found) == 1, f"{len(found)} SageMaker containers with {key}"
    return found[0]


@pytest.fixture(scope="module")
def sm_engine(
    llama_server_bin: Path, smollm2_gguf: Path, tmp_path_factory
) -> Iterator[tuple[Engine, dict[str, str], list[str]]]:
    slm_env = _sm_env("LLAMA_MODEL_ALIAS", lambda v: v == SLM)
    adapter, engine_port = free_port(), free_port()
    env = engine_env(slm_env, llama_server_bin, smollm2_gguf)
    env.update(SAGEMAKER_BIND_TO_PORT=str(adapter), LLAMA_ENGINE_PORT=str(engine_port), ADAPTER_HOST="127.0.0.1")
    # Started as root, `serve` drops to 65532, which cannot reach this machine's /root/.cache: keep root here.
    env["LLAMA_RUN_AS"] = "0:0"
    argv = print_command(env, "serve")
    engine = Engine(env, f"http://127.0.0.1:{adapter}", tmp_path_factory.mktemp("sm-slm") / "engine.log", "serve")
    try:
        yield engine, slm_env, argv
    finally:
        engine.stop()


def _sm_router_json() -> str:
    return _sm_env("ROUTER_CONFIG_JSON", lambda v: True)["ROUTER_CONFIG_JSON"]


def test_sagemaker_slm_classifies_the_router_prompt_for_a_2000_character_request(sm_engine) -> None:
    engine, slm_env, argv = sm_engine
    # The router parses its rendered environment as the endpoint will start it (deploy-time names are tokens).
    router_cfg = load_router_config({"ROUTER_CONFIG_JSON": _sm_router_json().replace("TOKEN", "slm-endpoint")})
    assert router_cfg.slm_endpoint_name and router_cfg.classify_max_chars == 2000
    slots, per_slot = int(slm_env["LLAMA_PARALLEL"]), int(slm_env["LLAMA_CTX_PER_SLOT"])
    assert (flag(argv, "--parallel"), flag(argv, "--ctx-size")) == (str(slots), str(slots * per_slot))
    assert per_slot >= budget.slm_budget(router_cfg).context_per_slot
    # Exactly the body the router sends through SageMaker Runtime's InvokeEndpoint for this request.
    classifier = Classifier(router_cfg, client=None)  # type: ignore[arg-type]
    text = request_text(
        {"messages": [{"role": "user", "content": LONG_REQUEST + " and more"}]}, router_cfg.classify_max_chars
    )
    r = httpx.post(f"{engine.url}/invocations", json=classifier.request_body(text, max_tokens=8), timeout=600)
    assert r.status_code == 200, r.text
    assert r.json()["choices"][0]["message"]["content"] in router_cfg.labels
    used = r.json()["usage"]["prompt_tokens"]
    # More than the old sizing gave a classification slot, less than the router's budget counts for it.
    assert 512 < used <= budget.slm_budget(router_cfg).classification_tokens - FULL_LABEL_TOKENS
    assert not engine.refused_context()


def test_sagemaker_router_classifies_and_answers_through_sagemaker_runtime(sm_engine, tmp_path: Path) -> None:
    """The router started as RouterEndpoint starts it (`serve`, ROUTER_CONFIG_JSON as rendered), reaching the SLM
    endpoint's container through a loopback SageMaker Runtime (real botocore); the escalation endpoint is served
    by the same container (the LLM is not what this test is about)."""
    engine, _, _ = sm_engine
    rendered = json.loads(_sm_router_json())
    names = {"slm": "prefilter-sm-slm", "llm": "prefilter-sm-llm"}
    standin = AwsStandIn(engine.url, containers={names["slm"]: engine.url, names["llm"]: engine.url}).start()
    cfg = json.loads(json.dumps(rendered))
    cfg.update(slm_endpoint_name=names["slm"], slm_region="us-east-1", slm_endpoint_url=standin.url)
    cfg["escalation"].update(endpoint_name=names["llm"], region="us-east-1", endpoint_url=standin.url)
    cfg["timeouts"] = {"classify_s": 120, "first_byte_s": 300, "total_s": 600}
    changed = {k for k in set(cfg) | set(rendered) if cfg.get(k) != rendered.get(k)}
    assert changed <= {"slm_endpoint_name", "slm_region", "slm_endpoint_url", "escalation", "timeouts"}, changed
    port = free_port()
    try:
        # The environment the endpoint's container gets (ROUTER_CONFIG_JSON wins over the harness' config file).
        env = {**AWS_ENV, "ROUTER_PORT": str(port), "ROUTER_CONFIG_JSON": json.dumps(cfg, separators=(",", ":"))}
        with running_router(
            {**cfg, "listen_port": port}, tmp_path, env=env, args=("serve",)
        ) as r:  # the harness' file: unused
            long = httpx.post(
                f"{r.url}/invocations",
                timeout=600,
                json={"messages": [{"role": "user", "content": LONG_REQUEST}], "max_tokens": 4, "temperature": 0},
            )
            assert long.status_code == 200, long.text
            assert "x-router-label" in long.headers, f"not classified by the SLM:\n{r.log_tail()}"
            assert "classifying a shorter head and tail" not in r.log.read_text(errors="replace")
            simple = httpx.post(
                f"{r.url}/invocations",
                timeout=600,
                json={"messages": [{"role": "user", "content": "Hello!"}], "max_tokens": 16, "temperature": 0},
            )
            assert simple.status_code == 200, simple.text
            assert (simple.headers["x-router-route"], simple.headers["x-router-label"]) == ("slm", "simple")
            assert simple.json()["choices"][0]["message"]["content"].strip()
    finally:
        standin.stop()
    assert not engine.refused_context()


def test_eks_router_classifies_a_long_cjk_request_on_a_shorter_head_and_tail(eks_engine, eks_router) -> None:
    """Chinese is denser in SmolLM2 tokens than the budget's bound: 2,000 characters overflow the slot, and the
    classifier retries on a shorter head and tail instead of escalating the request unclassified; a request
    that does not fit the SLM's slot is never answered by it (it escalates whatever the label)."""
    r = httpx.post(
        f"{eks_router.url}/v1/chat/completions",
        timeout=600,
        json={
            "messages": [{"role": "user", "content": repeated(NOT_COVERED["chinese"], 2000)}],
            "max_tokens": 4,
            "temperature": 0,
        },
    )
    assert r.status_code == 200, r.text
    assert "x-router-label" in r.headers, (
        f"not classified (route {r.headers.get('x-router-route')}):\n{eks_router.log_tail()}"
    )
    assert "classifying a shorter head and tail" in eks_router.log.read_text(errors="replace")
    assert r.headers["x-router-route"] == "llm" and "x-router-fallback" not in r.headers
