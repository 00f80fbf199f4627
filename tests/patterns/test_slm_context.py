"""SlmPrefilter from library props (no config.yaml): the SLM's slots are sized for the router config the pattern
renders, and a model that cannot hold the router's prompt is refused at synth with the fix."""

from __future__ import annotations

from dataclasses import replace

import pytest

from cpu_inference import sizing
from cpu_inference.patterns import DeploymentProps, EscalationTarget, ServedModel, SlmPrefilterProps
from cpu_inference.patterns.router_settings import RouterSettings
from slm_router.budget import budget_for

SLM = ServedModel(
    name="smollm2-1-7b",
    hf_repo="bartowski/SmolLM2-1.7B-Instruct-GGUF",
    file="SmolLM2-1.7B-Instruct-Q4_K_M.gguf",
    spec=sizing.ModelSpec(parameters_billions=1.7, context_window=4096, task="classification"),
    role="slm",
)
ESCALATION = EscalationTarget(kind="bedrock", model_id="anthropic.claude-3-5-haiku-20241022-v1:0")


def _props(slm: ServedModel = SLM, router: RouterSettings | None = None) -> SlmPrefilterProps:
    router = router or RouterSettings()
    return SlmPrefilterProps(deployment=DeploymentProps(models=(slm,)), escalation=ESCALATION, router=router)


def test_the_deployed_slm_holds_the_rendered_router_prompt() -> None:
    props = _props()
    props.validate()
    (deployed,) = props.served_models()
    rendered = props.router_config(urls={"smollm2-1-7b": "http://smollm2-1-7b:8080"}, region="eu-west-1")
    assert (
        sizing.context_per_slot(deployed.spec)
        >= budget_for(rendered).context_per_slot
        > sizing.TASK_CONTEXT["classification"]
    )
    assert sizing.context_per_slot(SLM.spec) == sizing.TASK_CONTEXT["classification"]  # what deployed before


def test_classify_max_chars_is_rendered_and_sizes_the_slot() -> None:
    short = _props(router=RouterSettings(classify_max_chars=500))
    assert short.router_config(urls={"smollm2-1-7b": "http://x:8080"}, region=None)["classify_max_chars"] == 500
    assert short.router.slm_context_per_slot() < _props().router.slm_context_per_slot()


def test_a_window_that_cannot_hold_the_router_prompt_is_refused_with_the_fix() -> None:
    small = replace(SLM, spec=replace(SLM.spec, context_window=2048))
    with pytest.raises(
        ValueError,
        match=r"needs \d+ tokens per slot .*context_window is 2048 — raise it .*RouterSettings.classify_max_chars",
    ):
        _props(small).validate()
    fixed = replace(SLM, spec=replace(SLM.spec, context_per_slot=1024))
    with pytest.raises(ValueError, match="context_per_slot is 1024 — leave it unset or raise it"):
        _props(fixed).validate()
    _props(small, RouterSettings(classify_max_chars=1000)).validate()  # a shorter classified input fits 2,048
