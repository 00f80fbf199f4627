"""The SLM pre-filter's router decision keys, as the router reads them, and the context its SLM must hold.

One builder for the decision part of the router's config (the EKS chart's ConfigMap, the SageMaker router
endpoint's ROUTER_CONFIG_JSON and `cpu-inference local` all render it), typed as the router's own
slm_router.config.Config (the one definition of that JSON: producers build it, the router parses it), and one
count of the tokens
the router's SLM needs per slot: the router's own (slm_router.budget), applied to exactly that JSON, so the
instructions, few-shot examples and classify_max_chars it counts are the ones the router will use — its
defaults included, read from the router itself rather than copied here.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from slm_router.budget import DEFAULT_ANSWER_MAX_TOKENS, slm_budget
from slm_router.config import Config as RouterConfig
from slm_router.config import Escalation, FewShot, config_of

__all__ = [
    "DEFAULT_ANSWER_MAX_TOKENS",
    "SLOT_CONTEXT_STEP",
    "RouterConfig",
    "decision",
    "decision_config",
    "prefilter_router_config",
    "slm_context_per_slot",
]

SLOT_CONTEXT_STEP = 128  # context per slot is rounded up to a multiple of this


def decision(
    *,
    labels: Sequence[str],
    slm_labels: Sequence[str],
    confidence_threshold: float,
    few_shot: Sequence[Mapping[str, str]] = (),
    instructions: str | None = None,
    classify_max_chars: int | None = None,
) -> RouterConfig:
    """The router config's decision keys (containers/router/README.md). Left out — so the router's own
    defaults apply — : few_shot when empty, instructions and classify_max_chars when None."""
    keys: dict[str, Any] = {
        "labels": tuple(labels),
        "slm_labels": tuple(slm_labels),
        "confidence_threshold": confidence_threshold,
    }
    if few_shot:
        keys["few_shot"] = tuple(FewShot(text=s["text"], label=s["label"]) for s in few_shot)
    if instructions is not None:
        keys["instructions"] = instructions
    if classify_max_chars is not None:
        keys["classify_max_chars"] = classify_max_chars
    return RouterConfig.of(**keys)


def decision_config(**settings: Any) -> dict[str, Any]:
    """`decision(...)` as its JSON object."""
    return decision(**settings).to_dict()


def prefilter_router_config(
    decided: RouterConfig, *, slm_url: str, escalation: Escalation, slm_model: str = ""
) -> RouterConfig:
    """The SLM pre-filter router's config on EKS and in `cpu-inference local` (the chart adds mode and listen
    address): the decision keys, the SLM's root URL and the escalation section. slm_model: the body's "model" on the
    SLM's requests — needed for a vLLM SLM, which answers 404 to any name but the one it serves (llama-server
    answers under any name, so it stays unset there)."""
    return decided.updated(slm_url=slm_url, escalation=escalation, **({"slm_model": slm_model} if slm_model else {}))


def slm_context_per_slot(
    router_config: RouterConfig | Mapping[str, Any], answer_max_tokens: int = DEFAULT_ANSWER_MAX_TOKENS
) -> int:
    """Tokens one SLM slot must hold for this router config (its classification prompt + label, and a request of
    classify_max_chars + answer_max_tokens), rounded up to SLOT_CONTEXT_STEP."""
    need = slm_budget(config_of(router_config), answer_max_tokens).context_per_slot
    return math.ceil(need / SLOT_CONTEXT_STEP) * SLOT_CONTEXT_STEP
