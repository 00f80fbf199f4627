"""`cpu-inference eval`: quality gate of a candidate endpoint against a baseline on a labelled dataset.
Exit 0 when the gate passes, 1 when it fails, 2 on a usage error."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from cpu_inference.cli.main import UserError


def register(sub: argparse._SubParsersAction) -> None:
    p = sub.add_parser(
        "eval",
        help="quality gate: candidate vs baseline on a labelled dataset (exit 1 when the gate fails)",
        description="Runs every example through both endpoints (temperature 0) and passes when candidate metric >= "
        "baseline metric - threshold. Fix the threshold before you look at results.",
    )
    p.add_argument("--dataset", required=True, help="JSONL: {text,label} | {text,tool} | {text,expected}")
    p.add_argument("--candidate", required=True, help="http(s)://host:port or sagemaker:NAME (e.g. the quantized SLM)")
    p.add_argument("--baseline", required=True, help="http(s)://host:port or sagemaker:NAME (the trusted model)")
    p.add_argument("--task", choices=("classification", "extraction", "routing"), default="classification")
    p.add_argument("--threshold", required=True, help="allowed drop in percentage points, e.g. 5pp")
    p.add_argument(
        "--gate-metric", help="metric the gate compares (default: accuracy | exact_match | tool_accuracy by task)"
    )
    shots = p.add_mutually_exclusive_group()
    shots.add_argument(
        "--few-shot",
        type=int,
        default=0,
        metavar="N",
        help="use N dataset examples (one class after another) as shots; they are then not scored",
    )
    shots.add_argument("--few-shot-file", help="JSONL in the dataset's format whose rows become the shots")
    p.add_argument("--schema", help="extraction: JSON schema file of the expected objects")
    p.add_argument("--tools", help="routing: tools file (OpenAI tools list or {name: description})")
    p.add_argument(
        "--labels",
        help="classification: a,b,c or a .json file (list, or {label: description} to describe each label in the prompt); default: the dataset's labels",
    )
    p.add_argument("--limit", type=int, help="score a stratified subset of this many examples")
    p.add_argument(
        "--no-constrain",
        dest="constrained",
        action="store_false",
        help="do not send response_format json_schema (free-text answers are parsed)",
    )
    p.add_argument("--max-tokens", type=int, help="default: 24 (classification, routing), 256 (extraction)")
    p.add_argument("--concurrency", type=int, default=2, help="requests in flight per endpoint (default 2)")
    p.add_argument("--candidate-model", help="`model` field for the candidate (servers that route by model)")
    p.add_argument("--baseline-model", help="`model` field for the baseline")
    p.add_argument("--api-key-env", metavar="VAR", help="send `Authorization: Bearer $VAR` to OpenAI-compatible URLs")
    p.add_argument("--region", help="AWS region for sagemaker: endpoints")
    p.add_argument("--sagemaker-endpoint-url", help="override the sagemaker-runtime endpoint URL")
    p.add_argument("--timeout", type=float, default=120.0, help="per-request timeout in seconds (default 120)")
    p.add_argument(
        "--out", default="eval-report", help="output directory for eval.json and eval.md (default eval-report)"
    )
    p.add_argument("--quiet", action="store_true", help="no progress bar")
    p.set_defaults(func=run)


def run(args: argparse.Namespace) -> int:
    from rich.console import Console
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from cpu_inference.evaluation.client import make_client
    from cpu_inference.evaluation.eval_report import REPORT_KIND, write_eval_report
    from cpu_inference.evaluation.quality import (
        DEFAULT_MAX_TOKENS,
        evaluate,
        gate,
        load_dataset,
        load_labels,
        load_tools,
        make_task,
        parse_threshold,
        stratified,
    )

    try:
        threshold = parse_threshold(args.threshold)
        examples = load_dataset(args.dataset, args.task)
        schema = json.loads(Path(args.schema).read_text(encoding="utf-8")) if args.schema else None
        tools = load_tools(args.tools) if args.tools else None
        labels = load_labels(args.labels) if args.labels else None
        task = make_task(args.task, examples, constrained=args.constrained, schema=schema, tools=tools, labels=labels)
        if args.few_shot_file:
            shots, shot_source = load_dataset(args.few_shot_file, args.task), args.few_shot_file
        elif args.few_shot:
            if args.few_shot < 0 or args.few_shot >= len(examples):
                raise ValueError(
                    f"--few-shot {args.few_shot}: must leave examples to score (dataset has {len(examples)})"
                )
            shots, shot_source = (
                stratified(examples, args.few_shot, task.strata),
                f"first {args.few_shot} of the dataset, one class after another; not scored",
            )
            held = {s.line for s in shots}
            examples = [e for e in examples if e.line not in held]
        else:
            shots, shot_source = [], None
        total = len(examples)
        if args.limit is not None:
            if args.limit < 1:
                raise ValueError("--limit must be >= 1")
            examples = stratified(examples, args.limit, task.strata)
        metric = args.gate_metric or task.primary_metric
        if metric not in task.metrics:
            raise ValueError(f"--gate-metric {metric!r}: {task.name} offers {', '.join(task.metrics)}")
        max_tokens = args.max_tokens or DEFAULT_MAX_TOKENS[task.name]
        clients = {
            role: make_client(
                url,
                timeout=args.timeout,
                region=args.region,
                sagemaker_endpoint_url=args.sagemaker_endpoint_url,
                api_key_env=args.api_key_env,
                max_pool=args.concurrency + 2,
            )
            for role, url in (("candidate", args.candidate), ("baseline", args.baseline))
        }
    except (OSError, ValueError) as exc:
        raise UserError(str(exc)) from None

    runs = {}
    columns = (TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn())
    try:
        with Progress(*columns, console=Console(stderr=True), disable=args.quiet) as progress:
            for role, model in (("candidate", args.candidate_model), ("baseline", args.baseline_model)):
                bar = progress.add_task(role, total=len(examples))
                runs[role] = evaluate(
                    clients[role],
                    task,
                    examples,
                    shots,
                    max_tokens=max_tokens,
                    concurrency=args.concurrency,
                    model=model,
                    on_done=lambda _p, bar=bar: progress.advance(bar),  # type: ignore[misc]  # a lambda with a default
                )
    finally:
        for c in clients.values():
            c.close()
    for role, r in runs.items():
        if r["errors"] == len(examples):
            raise UserError(f"{role}: every request failed, e.g. {r['first_errors'][0]}")
    result = gate(metric, runs["candidate"]["metrics"], runs["baseline"]["metrics"], threshold)
    report = {
        "kind": REPORT_KIND,
        "version": 1,
        "task": task.name,
        "dataset": args.dataset,
        "examples_total": total,
        "examples_scored": len(examples),
        "few_shot": {"count": len(shots), "source": shot_source, "lines": [s.line for s in shots]},
        "constrained": args.constrained,
        "max_tokens": max_tokens,
        "metrics": list(task.metrics),
        "gate": result.to_dict(),
        "verdict": result.sentence(),
        "candidate": runs["candidate"],
        "baseline": runs["baseline"],
    }
    paths = write_eval_report(report, Path(args.out))
    print(result.sentence())
    print("wrote " + ", ".join(str(p) for p in paths.values()))
    return 0 if result.passed else 1
