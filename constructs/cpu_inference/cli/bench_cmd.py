"""`cpu-inference bench`: cost per 1,000 queries at a p95 target for an OpenAI-compatible URL or a
SageMaker endpoint; `cpu-inference bench compare a.json b.json ...` ranks runs by that cost."""

from __future__ import annotations

import argparse
import os
import sys
from pathlib import Path

from cpu_inference.cli.main import UserError


def _ints(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(v) for v in text.split(",") if v.strip())
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected comma-separated integers, e.g. 1,2,4,8") from None
    if not values or any(v < 1 for v in values):
        raise argparse.ArgumentTypeError(f"{text!r}: every concurrency must be >= 1")
    return values


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "bench",
        help="load-test an endpoint: latency percentiles, throughput, cost per 1,000 queries at a p95 target",
        description="Closed-loop load at each concurrency level; picks the highest concurrency whose p95 meets "
        "--p95-ms and prices it. `bench compare R1.json R2.json ...` ranks earlier runs by cost per 1,000 queries.",
    )
    p.add_argument(
        "--endpoint",
        help="http(s)://host:port (OpenAI-compatible; /v1/chat/completions is appended) or sagemaker:ENDPOINT_NAME",
    )
    p.add_argument("--concurrency", type=_ints, default=(1, 2, 4, 8), help="levels to test (default 1,2,4,8)")
    p.add_argument("--requests", type=int, default=32, help="requests per level (default 32)")
    p.add_argument(
        "--prompt-file",
        help="one prompt per line, or .jsonl with messages/prompt/text (an eval dataset works); default: built-in support-desk prompts",
    )
    p.add_argument("--max-tokens", type=int, default=64, help="max output tokens per request (default 64)")
    p.add_argument(
        "--ignore-eos",
        action="store_true",
        help="ask the server to always generate --max-tokens tokens (llama-server/vLLM) for comparable runs",
    )
    p.add_argument(
        "--no-stream",
        dest="stream",
        action="store_false",
        help="non-streamed requests (no TTFT); SageMaker then uses InvokeEndpoint",
    )
    p.add_argument("--p95-ms", type=float, default=500.0, help="latency target for the p95 (default 500)")
    p.add_argument(
        "--latency-metric",
        choices=("e2e", "ttft"),
        default="e2e",
        help="which latency the p95 target applies to (default e2e)",
    )
    p.add_argument(
        "--max-error-rate",
        type=float,
        default=0.0,
        help="a level with more failed requests than this fraction does not qualify (default 0)",
    )
    p.add_argument("--instance-type", help="e.g. c7g.8xlarge or ml.c7g.8xlarge (ml. = SageMaker pricing)")
    p.add_argument("--instance-count", type=int, default=1, help="instances behind the endpoint (default 1)")
    p.add_argument(
        "--price-per-hour",
        type=float,
        help="USD per instance-hour; overrides the AWS Price List lookup (Spot, Savings Plans, other clouds)",
    )
    p.add_argument(
        "--region", help="AWS region of the endpoint and its price (default: AWS_REGION / profile, else us-east-1)"
    )
    p.add_argument(
        "--sagemaker-endpoint-url", help="override the sagemaker-runtime endpoint URL (VPC endpoint, local emulator)"
    )
    p.add_argument("--inference-component", help="SageMaker inference component name, if the endpoint uses them")
    p.add_argument("--model", help="`model` field for servers that route by it (llama-server ignores it)")
    p.add_argument("--api-key-env", metavar="VAR", help="send `Authorization: Bearer $VAR` (OpenAI-compatible URLs)")
    p.add_argument("--warmup", type=int, default=1, help="requests before measuring (default 1)")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds (default 120)")
    p.add_argument(
        "--max-seconds-per-level",
        type=float,
        default=600.0,
        help="stop sending new requests at a level after this long (default 600)",
    )
    p.add_argument(
        "--out",
        default="bench-report",
        help="output directory for bench.json, bench.md, bench.png (default bench-report)",
    )
    p.add_argument("--no-plot", dest="plot", action="store_false", help="skip the PNG")
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)
    actions = p.add_subparsers(dest="bench_action", metavar="[compare]")
    c = actions.add_parser("compare", help="one table of several bench reports, cheapest per 1,000 queries first")
    c.add_argument("reports", nargs="+", help="bench.json files")
    c.add_argument("--markdown", help="also write the table to this Markdown file")
    c.set_defaults(func=run_compare)


def _region(explicit: str | None) -> tuple[str, bool]:
    """(region, defaulted?)"""
    if explicit:
        return explicit, False
    env = os.environ.get("AWS_REGION") or os.environ.get("AWS_DEFAULT_REGION")
    if env:
        return env, False
    try:
        import boto3

        configured = boto3.session.Session().region_name
    except Exception:
        configured = None
    return (configured, False) if configured else ("us-east-1", True)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from cpu_inference.evaluation.bench import BenchPlan, run_bench
    from cpu_inference.evaluation.client import make_client
    from cpu_inference.evaluation.loadgen import LoadSettings, load_prompts
    from cpu_inference.evaluation.pricing import resolve_price
    from cpu_inference.evaluation.report import write_bench_report

    if not args.endpoint:
        raise UserError(
            "--endpoint is required (http(s)://host:port or sagemaker:NAME), or use `bench compare REPORT.json ...`"
        )
    if args.max_tokens < 1:
        raise UserError("--max-tokens must be >= 1")
    region, defaulted = _region(args.region)
    try:
        prompts = load_prompts(args.prompt_file)
    except (OSError, ValueError) as exc:
        raise UserError(f"--prompt-file: {exc}") from None
    load = LoadSettings(
        max_tokens=args.max_tokens,
        stream=args.stream,
        model=args.model,
        ignore_eos=args.ignore_eos,
        max_seconds=args.max_seconds_per_level,
    )
    plan = BenchPlan(
        endpoint=args.endpoint,
        concurrency=args.concurrency,
        requests=args.requests,
        p95_ms=args.p95_ms,
        latency_metric=args.latency_metric,
        max_error_rate=args.max_error_rate,
        instance_type=args.instance_type,
        instance_count=args.instance_count,
        region=region + (" (default)" if defaulted else ""),
        warmup=max(args.warmup, 0),
        prompt_source=f"{args.prompt_file} ({len(prompts)})" if args.prompt_file else f"built-in ({len(prompts)})",
        load=load,
    )
    try:
        plan.validate()
        price = resolve_price(args.instance_type, region, price_per_hour=args.price_per_hour)
        client = make_client(
            args.endpoint,
            timeout=args.timeout,
            region=region,
            sagemaker_endpoint_url=args.sagemaker_endpoint_url,
            api_key_env=args.api_key_env,
            max_pool=max(plan.concurrency) + 2,
            inference_component=args.inference_component,
        )
    except ValueError as exc:
        raise UserError(str(exc)) from None
    err = Console(stderr=True)
    total = plan.warmup + plan.requests * len(set(plan.concurrency))
    columns = (
        TextColumn("{task.description}"),
        BarColumn(),
        MofNCompleteColumn(),
        TextColumn("errors {task.fields[errors]}"),
        TimeElapsedColumn(),
    )
    try:
        with Progress(*columns, console=err, disable=args.quiet, transient=False) as progress:
            task = progress.add_task("warm-up", total=total, errors=0)
            errors = 0

            def on_result(r) -> None:
                nonlocal errors
                errors += 0 if r.ok else 1
                progress.update(task, advance=1, errors=errors)

            report = run_bench(
                client,
                prompts,
                plan,
                price,
                on_result=on_result,
                on_level=lambda c: progress.update(task, description=f"concurrency {c}"),
            )
    finally:
        client.close()
    paths = write_bench_report(report, Path(args.out), plot=args.plot)
    print(report["verdict"])
    if not price.known:
        print(f"cost unknown: {price.detail}", file=sys.stderr)
    if report["totals"]["requests"] and report["totals"]["errors"] == report["totals"]["requests"]:
        print(f"every request failed, e.g. {report['levels'][0]['first_errors'][0]}", file=sys.stderr)
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    # Exit 0 whenever the benchmark ran: missing the target is a finding, not a tool failure.
    return 0 if report["totals"]["errors"] < report["totals"]["requests"] else 1


def run_compare(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.table import Table

    from cpu_inference.evaluation.report import compare_rows, load_bench_report, markdown_table

    try:
        reports = [load_bench_report(p) for p in args.reports]
    except ValueError as exc:
        raise UserError(str(exc)) from None
    header, rows = compare_rows(reports)
    table = Table(title="cost per 1,000 queries at the p95 target (cheapest first)")
    for h in header:
        table.add_column(h, overflow="fold")
    for r in rows:
        table.add_row(*r)
    # Piped output has no terminal width; 160 columns keeps the table readable in logs and CI.
    Console(width=None if sys.stdout.isatty() else 160).print(table)
    targets = {(r["target"]["p95_ms"], r["target"]["latency_metric"]) for r in reports}
    if len(targets) > 1:
        print("note: these runs used different p95 targets; their costs are not directly comparable", file=sys.stderr)
    if args.markdown:
        Path(args.markdown).write_text(markdown_table(header, rows) + "\n", encoding="utf-8")
    return 0
