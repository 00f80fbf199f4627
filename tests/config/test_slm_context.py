"""The router's SLM is sized for the router's prompt: config validation, `cpu-inference size` and the pattern props
all take the context per slot from the router's own budget (slm_router/budget.py) for the config it renders."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from cpu_inference import sizing
from cpu_inference.config import ConfigError, load, parse, size_model
from cpu_inference.config.rules import router_decision, slm_context_need
from cpu_inference.patterns.from_config import slm_prefilter_props
from slm_router.budget import budget_for
from slm_router.config import DEFAULT_FEW_SHOT
from slm_router.config import Config as RouterConfig

ROOT = Path(__file__).resolve().parents[2]
CLI = str(Path(sys.executable).parent / "cpu-inference")
OLD_CLASSIFICATION_CONTEXT = 512  # what a classification slot got before the router's prompt was counted


def _default() -> dict:
    return yaml.safe_load((ROOT / "config.yaml").read_text())


def _text(data: dict) -> str:
    return yaml.safe_dump(data, sort_keys=False)


def test_default_slm_slot_holds_the_router_prompt_not_the_task_default() -> None:
    config = load(ROOT / "config.yaml")
    slm = config.models[0]
    s = size_model(config, slm)
    assert s is not None and s.fits
    need = budget_for(router_decision(config), config.router.answer_max_tokens).context_per_slot
    assert s.ctx_per_slot >= need > OLD_CLASSIFICATION_CONTEXT
    assert s.ctx_per_slot == slm_context_need(config) <= slm.context_window
    # The pattern's props carry the same need into the deployed SLM spec (EKS chart and SageMaker endpoint).
    props = slm_prefilter_props(config)
    (deployed,) = [m for m in props.served_models() if m.role == "slm"]
    assert sizing.context_per_slot(deployed.spec) == s.ctx_per_slot


def test_the_router_defaults_are_counted_when_the_config_leaves_them_out() -> None:
    """No second copy of the router's instructions/few-shot/classify_max_chars: an empty decision section counts
    the router's own defaults; spelling them out gives the same budget."""
    config = load(ROOT / "config.yaml")
    decision = router_decision(config)
    assert "few_shot" not in decision and "instructions" not in decision and "classify_max_chars" not in decision
    d = RouterConfig()
    spelled = {
        **decision,
        "instructions": d.instructions,
        "classify_max_chars": d.classify_max_chars,
        "few_shot": [{"text": t, "label": lab} for t, lab in DEFAULT_FEW_SHOT],
    }
    assert budget_for(spelled) == budget_for(decision)


def test_a_context_window_too_small_for_the_router_prompt_is_one_line_naming_the_key_and_fix() -> None:
    data = _default()
    data["models"][0]["context_window"] = 2048
    with pytest.raises(ConfigError) as err:
        parse(_text(data))
    (line,) = str(err.value).splitlines()
    need = slm_context_need(parse(_text(_default())))
    assert line.startswith("config.yaml: models[0].context_window: 2048 is too small: the router's SLM needs")
    assert f"raise context_window to ≥ {need}" in line and "router.classify_max_chars" in line


def test_an_explicit_context_per_slot_below_the_router_prompt_is_refused() -> None:
    data = _default()
    data["models"][0]["context_per_slot"] = 512
    with pytest.raises(
        ConfigError, match=r"models\[0\]\.context_per_slot: 512 is too small: .* — remove context_per_slot"
    ):
        parse(_text(data))


def test_shorter_classify_max_chars_shrinks_the_slot_and_reaches_the_router_config() -> None:
    data = _default()
    data["models"][0]["context_window"] = 2048
    data["router"]["classify_max_chars"] = 1000
    config = parse(_text(data))  # now valid: the prompt for 1,000 characters fits 2,048 tokens
    assert slm_context_need(config) < slm_context_need(load(ROOT / "config.yaml"))
    assert router_decision(config)["classify_max_chars"] == 1000
    assert slm_prefilter_props(config).router.router_config()["classify_max_chars"] == 1000


def test_answer_max_tokens_grows_the_slot() -> None:
    data = _default()
    data["router"]["answer_max_tokens"] = 2048
    bigger = parse(_text(data))
    default = budget_for(router_decision(bigger))  # answer_max_tokens 512
    assert slm_context_need(bigger) >= default.answer_tokens - 512 + 2048 > slm_context_need(load(ROOT / "config.yaml"))


def test_model_farm_models_keep_the_task_context() -> None:
    data = yaml.safe_load((ROOT / "examples" / "model-farm-eks.yaml").read_text())
    config = parse(_text(data))
    for m in config.models:
        s = size_model(config, m)
        assert s is not None and s.ctx_per_slot == min(
            sizing.TASK_CONTEXT[m.task], m.context_window, m.context_per_slot or 1 << 30
        )


def test_validate_cli_prints_the_one_line(tmp_path: Path) -> None:
    data = _default()
    data["models"][0]["context_window"] = 2048
    cfg = tmp_path / "config.yaml"
    cfg.write_text(_text(data))
    out = subprocess.run([CLI, "validate", str(cfg)], capture_output=True, text=True, timeout=120)
    assert out.returncode != 0
    assert "models[0].context_window: 2048 is too small" in out.stdout + out.stderr
    assert "Traceback" not in out.stderr
