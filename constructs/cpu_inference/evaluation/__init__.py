"""Before-deploy measurements: `bench` (latency, throughput, cost per 1,000 queries at a p95 target)
and `eval` (a quality gate of a candidate model against a baseline). Plain Python, no aws_cdk; boto3 only
for SageMaker endpoints and the AWS Price List API; matplotlib only when a plot is written."""

from cpu_inference.evaluation.bench import BenchPlan, build_report, run_bench
from cpu_inference.evaluation.client import ChatResult, OpenAIClient, SageMakerClient, chat_body, make_client
from cpu_inference.evaluation.loadgen import LoadSettings, load_prompts, run_level
from cpu_inference.evaluation.pricing import Price, cost_per_1k_queries, lookup_price, resolve_price
from cpu_inference.evaluation.quality import GateResult, evaluate, gate, load_dataset, make_task, parse_threshold
from cpu_inference.evaluation.stats import LevelStats, percentile, pick_concurrency, summarize

__all__ = [
    "BenchPlan",
    "ChatResult",
    "GateResult",
    "LevelStats",
    "LoadSettings",
    "OpenAIClient",
    "Price",
    "SageMakerClient",
    "build_report",
    "chat_body",
    "cost_per_1k_queries",
    "evaluate",
    "gate",
    "load_dataset",
    "load_prompts",
    "lookup_price",
    "make_client",
    "make_task",
    "parse_threshold",
    "percentile",
    "pick_concurrency",
    "resolve_price",
    "run_bench",
    "run_level",
    "summarize",
]
