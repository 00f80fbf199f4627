"""The SageMaker latency alarm's threshold rule, its one owner (plain Python: no aws_cdk).

SageMaker's ModelLatency is the container's whole answer ("the time taken to complete the inference in the
container", docs.aws.amazon.com/sagemaker/latest/dg/monitoring-cloudwatch.html), i.e. the whole generation. So the
alarm of an engine endpoint allows the first-token SLO plus the decode time of the answer it budgets for:

    threshold = latency_slo + alarm_output_tokens x time_per_output_token, at most 90 % of the generation budget

(the adapter cuts a non-streamed answer at the budget and answers 504, so ModelLatency never exceeds it: a threshold
at or above it could never fire). An endpoint that generates nothing itself (the SLM pre-filter's router) alarms on
its end-to-end SLO alone. `latency_alarm` is the rule; the tables below are its inputs' defaults.

The SLO defaults: the first-token SLO is config/schema.py FIRST_TOKEN_SLO_MS (config.yaml's `slo.p95_latency_ms`
default, which sits below this package, so config can read it); the routed request's end-to-end SLO is
ROUTED_REQUEST_SLO_MS here.
"""

from __future__ import annotations

from collections.abc import Iterable
from dataclasses import dataclass

from cpu_inference.engines import LLAMA_CPP, VLLM

# Output tokens the latency alarm budgets per request, by task: routing/classification answers are a label
# (AWS guidance: 2-3 output tokens), embeddings/rerank generate none, generations are budgeted at 256 tokens.
ALARM_OUTPUT_TOKENS = {
    "classification": 8,
    "routing": 8,
    "embedding": 0,
    "rerank": 0,
    "extraction": 256,
    "chat": 256,
    "batch": 256,
}
ANSWER_TASK = "chat"  # what a model that answers requests (the router's SLM) is budgeted as, whatever its task
# The decode time per output token the latency alarm budgets for, by engine. llama.cpp: 100 ms = 10 tok/s per stream
# (AWS guidance: a 7B Q4 decodes 10-20 tok/s on 32 cores). vLLM serves BF16 checkpoints: decode is memory-bandwidth
# bound and BF16 reads 16 bits a weight where Q4_K_M reads 4.85 (sizing.BITS_PER_WEIGHT), and the vLLM + ZenDNN
# reference (FIELD-NOTES: Qwen3-8B BF16, 24 vCPUs, concurrency 4) decodes 40 tok/s in all = 100 ms a token per
# stream — at llama.cpp's budget a normal 8B vLLM endpoint would sit on the alarm. 250 ms (4 tok/s) leaves it 2.5x.
TIME_PER_OUTPUT_TOKEN_MS = {LLAMA_CPP: 100, VLLM: 250}
# ModelLatency of a non-streamed answer never exceeds the generation budget (cut there), so the threshold stays
# below it, at this share, or it could never fire.
LATENCY_ALARM_BUDGET_FRACTION = 0.9
# The SageMaker router endpoint's p95 ModelLatency target, end to end: classification on the SLM plus the whole
# answer of the model that answers (non-streamed). A different meaning from the first-token SLO of one model's
# endpoint, so a different default: 10 s holds a short routed answer; set RouterEndpointProps.latency_slo to your
# answers' p95.
ROUTED_REQUEST_SLO_MS = 10_000


@dataclass(frozen=True)
class LatencyAlarm:
    """A p95 ModelLatency threshold and how it was derived (for the alarm description; "" when it is the SLO)."""

    threshold_ms: float
    basis: str


def alarm_output_tokens(tasks: Iterable[str], *, answers: bool = False) -> int:
    """Output tokens per request the alarm budgets for an endpoint serving models of `tasks` (a multi-model pool:
    its longest answer). answers: the model also answers requests (the router's SLM), so it gets an answer's budget
    whatever its task."""
    budgets = [ALARM_OUTPUT_TOKENS.get(task, ALARM_OUTPUT_TOKENS[ANSWER_TASK]) for task in tasks]
    if answers or not budgets:
        budgets.append(ALARM_OUTPUT_TOKENS[ANSWER_TASK])
    return max(budgets)


def time_per_output_token_ms(engine: str) -> float:
    """The decode time per output token the alarm budgets for on `engine`."""
    return float(TIME_PER_OUTPUT_TOKEN_MS[engine])


def latency_alarm(
    slo_ms: float,
    *,
    output_tokens: int = 0,
    time_per_output_token_ms: float = 0.0,
    generation_budget_seconds: float | None = None,
) -> LatencyAlarm:
    """The p95 ModelLatency an endpoint's alarm allows. An engine endpoint gives its answer's output tokens, the
    decode time per token and its generation budget (when the container cuts a non-streamed answer); an endpoint
    that only relays (the router) gives its SLO alone."""
    if generation_budget_seconds is None:
        return LatencyAlarm(slo_ms + output_tokens * time_per_output_token_ms, "")
    decode_ms = slo_ms + output_tokens * time_per_output_token_ms
    ceiling_ms = generation_budget_seconds * 1000 * LATENCY_ALARM_BUDGET_FRACTION
    basis = f"{slo_ms:g} ms first-token SLO + {output_tokens} output tokens x {time_per_output_token_ms:g} ms"
    if decode_ms > ceiling_ms:
        basis = (
            f"{basis} = {decode_ms:g} ms, capped at {LATENCY_ALARM_BUDGET_FRACTION:.0%} of the "
            f"{generation_budget_seconds:g} s at which a non-streamed answer is cut"
        )
    return LatencyAlarm(min(decode_ms, ceiling_ms), basis)
