"""`cpu-inference farm status CONFIG --bucket BUCKET`: which models of a model farm's catalog have landed in S3.

The deploy starts the farm's catalog copy (a Step Functions fan-out) and does not wait for it, except for the
dedicated models. Per model of the catalog, from the model bucket:
  landed       every key of its layouts is there (EKS pools and dedicated models: the GGUF
               `farm/<name>/<idhash>/<file>`; a SageMaker multi-model endpoint: the tarball
               `farm/<name>/<idhash>-<flags>.tar.gz`, its TargetModel without `farm/`)
  copy_failed  not landed, and the copy left `farm/<name>/<idhash>/copy-failed.json` (its reason is shown)
  copying      neither yet
On EKS the gateway answers a model still copying with 503; on SageMaker an endpoint cannot (SageMaker fetches a
TargetModel before its container sees the request), so this is the way to see copy progress on both targets.

Exit codes: 0 every model landed; 3 some still copying (none failed); 4 some copy failed; 2 a usage error (no
credentials, no such bucket, access denied, a --model not in the catalog, a config that is not a model farm).
With --wait it polls every --interval seconds (default 30) until no model is copying or --timeout (default 3600)
passes, printing a progress line per poll on stderr, then exits as above (a timeout with models copying: 3), so a
pipeline can run `cdk deploy && cpu-inference farm status config.yaml --bucket B --wait`.

The bucket is the farm's model bucket: the stack's `ModelFarmServingModelBucket…` AWS::S3::Bucket. Credentials,
region and endpoint come from botocore's default chain (AWS_PROFILE, AWS_REGION, AWS_ENDPOINT_URL_S3, …); the
credentials need s3:ListBucket on the bucket, and s3:GetObject + kms:Decrypt (the bucket's key) on `farm/*` to read
a failure's reason.
"""

from __future__ import annotations

import argparse
import difflib
import json
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from concurrent.futures import ThreadPoolExecutor
from dataclasses import asdict, dataclass, field
from typing import Any

from cpu_inference.cli.main import UserError
from model_download.catalog import FARM_PREFIX, Catalog, failure_key, mme_target_model

# How the bucket is read (measured by tests/cli/test_farm_status.py::test_a_thousand_model_farm against moto's
# server, 1,000 models: one ListObjectsV2 pass over `farm/` ~0.3 s; one HeadObject per key in 16 threads ~6 s).
# ListObjectsV2 returns up to 1,000 keys a page (botocore s3 ListObjectsV2Request.MaxKeys; "returns up to 1,000 key
# names", S3 API reference ListObjectsV2), so a 1,000-model catalog's keys and markers are 1–3 requests, against
# ≥ 1,000 HeadObjects (one per key, plus a marker read per model not landed). The listing reads every object under
# `farm/` — earlier identities of a model (a new revision is a new key; keys are never overwritten or deleted) and
# the copy's `farm/_runs/` results — so its cost grows with the bucket's history, at 1 request per 1,000 objects.
# It needs s3:ListBucket, which HeadObject needs too to tell a missing key (404) from a forbidden one (403 without
# it: S3 API reference HeadObject, "Permissions"). S3 lists are strongly consistent with writes (S3 user guide,
# "Amazon S3 data consistency model"), so a key the copy has written is listed.
MARKER_READERS = 16  # GetObjects in flight to read failure markers' reasons (only models whose copy failed)
DEFAULT_INTERVAL_S = 30.0
DEFAULT_TIMEOUT_S = 3600.0
EXIT_LANDED = 0
EXIT_COPYING = 3
EXIT_FAILED = 4
LANDED, COPY_FAILED, COPYING = "landed", "copy_failed", "copying"
STATES = (COPY_FAILED, COPYING, LANDED)  # the table's order: what needs attention first
# Credentials S3 rejects (S3 API reference, "Error responses"): refreshing them is the fix.
_BAD_CREDENTIALS = {
    "InvalidAccessKeyId",
    "SignatureDoesNotMatch",
    "ExpiredToken",
    "InvalidToken",
    "TokenRefreshRequired",
}


def register(farm_sub: argparse._SubParsersAction) -> None:
    p = farm_sub.add_parser(
        "status",
        help="which models of the farm's catalog have landed in S3, are copying or failed (exit 0 / 3 / 4); --wait",
        description=__doc__,
        formatter_class=argparse.RawDescriptionHelpFormatter,
    )
    p.add_argument("config", nargs="?", default="config.yaml", help="the farm's config (its models and pools)")
    p.add_argument("--bucket", required=True, help="the farm's model bucket (the stack's ModelFarmServingModelBucket…)")
    p.add_argument("--model", action="append", metavar="NAME", help="only this model of the catalog (repeatable)")
    p.add_argument("--json", action="store_true", help="print JSON instead of a table")
    p.add_argument("--wait", action="store_true", help="poll until no model is copying (or --timeout)")
    p.add_argument(
        "--timeout",
        type=float,
        metavar="SECONDS",
        help=f"--wait: give up after this long (default {DEFAULT_TIMEOUT_S:g})",
    )
    p.add_argument(
        "--interval",
        type=float,
        metavar="SECONDS",
        help=f"--wait: seconds between polls (default {DEFAULT_INTERVAL_S:g})",
    )
    p.set_defaults(func=run)


# --- the catalog ---------------------------------------------------------------------------------------------------


def farm_catalog(config: Any) -> Catalog | None:
    """The catalog the synthesized app copies (None: the farm copies nothing through a catalog): the props the app
    builds (from_config.model_farm_props), the pools' plans (model_farm.plan_pool: the MME tarballs' flags, so their
    keys) and each entry as model_farm.catalog_entry makes it, composed by model_farm.farm_catalog_entries,
    which ModelFarm uses too.
    tests/cli/test_farm_status.py::test_the_status_catalog_is_the_one_the_app_deploys pins it to the construct's."""
    from cpu_inference.patterns.from_config import model_farm_props
    from cpu_inference.patterns.model_farm import farm_catalog_entries, plan_pool

    props = model_farm_props(config)
    try:
        props.validate()
    except ValueError as exc:  # what synth would refuse: one line, as `cdk synth` prints it
        raise UserError(str(exc)) from None
    pools = [p for p in props.pools if props.members(p.name)]
    in_catalog = props.dedicated_in_catalog
    if not pools and not in_catalog:
        return None
    entries, layouts = farm_catalog_entries(props, {p.name: plan_pool(p, props.members(p.name)) for p in pools})
    return Catalog(entries, layouts)


def select(catalog: Catalog, names: Sequence[str] | None, config: Any, config_path: str) -> Catalog:
    """The entries named by --model (all for None); a name not in the catalog is refused in one line."""
    if not names:
        return catalog
    known = {e.name for e in catalog.entries}
    for name in names:
        if name in known:
            continue
        if any(m.name == name for m in config.models):  # a dedicated model copied by its own ModelArtifact
            raise UserError(
                f"--model {name}: not copied by {config_path}'s catalog (a vLLM model, or farm.dedicated_copy: "
                "artifact): its own ModelArtifact copies it, and the deploy waits for that copy"
            )
        close = difflib.get_close_matches(name, sorted(known), n=1)
        hint = f" — did you mean {close[0]}?" if close else ""
        raise UserError(f"--model {name}: no such model in {config_path} ({len(known)} in its catalog){hint}")
    return catalog.subset(list(names))


# --- the bucket ----------------------------------------------------------------------------------------------------


def s3_client() -> Any:
    """boto3's S3 client on the default chain: AWS_ENDPOINT_URL_S3 is botocore's own setting (botocore
    configprovider.py ClientEndpointProvider: AWS_ENDPOINT_URL_<SERVICE>, then AWS_ENDPOINT_URL, then the profile's
    `services` section), as are the region and the credentials."""
    import boto3
    from botocore.config import Config

    return boto3.session.Session().client(
        "s3", config=Config(max_pool_connections=MARKER_READERS, retries={"mode": "standard"})
    )


def _aws_error(exc: Exception, bucket: str, what: str) -> UserError:
    """One line naming the fix for what botocore raises on a read of the bucket."""
    from botocore.exceptions import (
        ClientError,
        EndpointConnectionError,
        NoCredentialsError,
        NoRegionError,
        PartialCredentialsError,
    )

    if isinstance(exc, NoCredentialsError | PartialCredentialsError):
        return UserError(
            "no AWS credentials found (botocore's default chain): set AWS_PROFILE, run `aws configure` or "
            "`aws sso login`, or export AWS_ACCESS_KEY_ID and AWS_SECRET_ACCESS_KEY"
        )
    if isinstance(exc, NoRegionError):
        return UserError("no AWS region: set AWS_REGION (the farm's region) or the profile's region")
    if isinstance(exc, EndpointConnectionError):
        return UserError(f"cannot reach S3 ({exc}): check the network, AWS_REGION and AWS_ENDPOINT_URL_S3")
    if isinstance(exc, ClientError):
        err = exc.response.get("Error", {})
        code, message = str(err.get("Code", "")), str(err.get("Message", "")).rstrip(".")
        if code == "NoSuchBucket":
            return UserError(
                f"--bucket {bucket}: no such bucket — give the farm's model bucket (its stack's "
                "ModelFarmServingModelBucket… AWS::S3::Bucket resource)"
            )
        if code in ("AccessDenied", "403", "AllAccessDisabled"):
            return UserError(
                f"--bucket {bucket}: access denied to {what} ({message or code}) — the credentials need "
                f"s3:ListBucket on the bucket, and s3:GetObject and kms:Decrypt on {FARM_PREFIX}* for failure reasons"
            )
        if code in _BAD_CREDENTIALS:
            return UserError(f"AWS rejected the credentials ({code}: {message}): refresh them (e.g. `aws sso login`)")
        return UserError(f"--bucket {bucket}: {what} failed ({code}: {message})")
    return UserError(f"--bucket {bucket}: {what} failed ({exc})")


def _boto_errors() -> tuple[type[Exception], ...]:
    from botocore.exceptions import BotoCoreError, ClientError

    return (BotoCoreError, ClientError)


def list_keys(s3: Any, bucket: str) -> set[str]:
    """Every key under `farm/` (one ListObjectsV2 request per 1,000 keys)."""
    keys: set[str] = set()
    try:
        for page in s3.get_paginator("list_objects_v2").paginate(Bucket=bucket, Prefix=FARM_PREFIX):
            keys.update(o["Key"] for o in page.get("Contents", ()))
    except _boto_errors() as exc:
        raise _aws_error(exc, bucket, f"list s3://{bucket}/{FARM_PREFIX}") from None
    return keys


def read_marker(s3: Any, bucket: str, key: str) -> dict[str, Any] | None:
    """The failure marker's JSON ({"model", "reason", "attempt", "at"}: catalog_copy.CatalogCopy.mark_failed); None
    when it is gone (a later attempt may have landed since the listing); {"reason": why} when it cannot be read."""
    from botocore.exceptions import ClientError

    try:
        body = s3.get_object(Bucket=bucket, Key=key)["Body"].read()
    except ClientError as exc:
        code = str(exc.response.get("Error", {}).get("Code", ""))
        if code in ("NoSuchKey", "404"):
            return None
        return {
            "reason": f"(the marker s3://{bucket}/{key} cannot be read: {code} — needs s3:GetObject and kms:Decrypt)"
        }
    except _boto_errors() as exc:
        raise _aws_error(exc, bucket, f"read s3://{bucket}/{key}") from None
    try:
        data = json.loads(body)
    except ValueError:
        return {"reason": f"(the marker s3://{bucket}/{key} is not JSON)"}
    return data if isinstance(data, dict) else {"reason": f"(the marker s3://{bucket}/{key} is not a JSON object)"}


@dataclass
class ModelStatus:
    model: str
    state: str  # landed | copy_failed | copying
    keys: dict[str, dict[str, Any]]  # layout -> {"key": ..., "landed": bool}
    marker: str  # the failure marker's key
    target_model: str | None = None  # the `mme` layout's InvokeEndpoint TargetModel
    reason: str | None = None
    attempt: int | None = None
    at: str | None = None


@dataclass
class Status:
    bucket: str
    models: list[ModelStatus] = field(default_factory=list)
    timed_out: bool = False
    waited_seconds: float | None = None

    def counts(self) -> dict[str, int]:
        out = {state: 0 for state in STATES}
        for m in self.models:
            out[m.state] += 1
        return out

    def summary(self) -> str:
        c = self.counts()
        return f"{c[LANDED]} of {len(self.models)} landed, {c[COPY_FAILED]} failed, {c[COPYING]} copying"

    def exit_code(self) -> int:
        c = self.counts()
        return EXIT_FAILED if c[COPY_FAILED] else EXIT_COPYING if c[COPYING] else EXIT_LANDED

    def to_dict(self) -> dict[str, Any]:
        c = self.counts()
        return {
            "bucket": self.bucket,
            "summary": {
                "total": len(self.models),
                "landed": c[LANDED],
                "failed": c[COPY_FAILED],
                "copying": c[COPYING],
            },
            "exit_code": self.exit_code(),
            "timed_out": self.timed_out,
            "waited_seconds": self.waited_seconds,
            "models": [asdict(m) for m in self.models],
        }


def check(s3: Any, bucket: str, catalog: Catalog, known: Mapping[str, ModelStatus] | None = None) -> list[ModelStatus]:
    """Each entry's state from one listing of `farm/` (+ a GetObject per failure marker, for its reason). `known`:
    models already landed by an earlier poll, kept as they are (an identity key is never overwritten)."""
    listed = list_keys(s3, bucket)
    out: list[ModelStatus] = []
    for entry in catalog.entries:
        if known and entry.name in known and known[entry.name].state == LANDED:
            out.append(known[entry.name])
            continue
        keys = {layout: {"key": key, "landed": key in listed} for layout, key in catalog.keys(entry).items()}
        landed = all(k["landed"] for k in keys.values())
        marker = failure_key(entry)
        out.append(
            ModelStatus(
                model=entry.name,
                state=LANDED if landed else COPY_FAILED if marker in listed else COPYING,
                keys=keys,
                marker=marker,
                target_model=mme_target_model(entry) if "mme" in keys else None,
            )
        )
    failed = [m for m in out if m.state == COPY_FAILED and m.reason is None]
    if failed:
        with ThreadPoolExecutor(max_workers=MARKER_READERS, thread_name_prefix="farm-status") as pool:
            for m, data in zip(failed, pool.map(lambda m: read_marker(s3, bucket, m.marker), failed), strict=True):
                if data is None:  # gone since the listing: the copy is at it again
                    m.state = COPYING
                    continue
                m.reason = str(data.get("reason") or "(no reason in the marker)")
                m.attempt = data.get("attempt") if isinstance(data.get("attempt"), int) else None
                m.at = str(data["at"]) if data.get("at") else None
    return out


def poll(
    s3: Any,
    bucket: str,
    catalog: Catalog,
    *,
    wait: bool,
    timeout: float,
    interval: float,
    progress: Callable[[str], None],
    clock: Callable[[], float] = time.monotonic,
    sleep: Callable[[float], None] = time.sleep,
) -> Status:
    """One check, or (wait) checks every `interval` s until no model is copying or `timeout` s have passed."""
    began = clock()
    status = Status(bucket)
    while True:
        status.models = check(s3, bucket, catalog, {m.model: m for m in status.models})
        if not wait:
            return status
        elapsed = clock() - began
        status.waited_seconds = round(elapsed, 1)
        progress(f"farm status: {status.summary()} (after {elapsed:.0f} s)")
        if not status.counts()[COPYING]:
            return status
        if elapsed >= timeout:
            status.timed_out = True
            progress(f"farm status: --timeout {timeout:g} s passed with models still copying")
            return status
        sleep(max(0.0, min(interval, timeout - elapsed)))


# --- output --------------------------------------------------------------------------------------------------------


def _keys_text(m: ModelStatus) -> str:
    return " ".join(f"{layout}:{'yes' if k['landed'] else 'no'}" for layout, k in m.keys.items())


def render_table(status: Status) -> str:
    order = {state: i for i, state in enumerate(STATES)}
    rows = [
        (m.model, _keys_text(m), m.state, m.reason or "")
        for m in sorted(status.models, key=lambda m: order[m.state])  # stable: catalog order within a state
    ]
    head = ("model", "keys landed", "state", "reason")
    widths = [max(len(x) for x in col) for col in zip(head, *rows, strict=True)]
    fmt = "  ".join(f"{{:<{w}}}" for w in widths[:-1]) + "  {}"
    out = [fmt.format(*head).rstrip(), *(fmt.format(*row).rstrip() for row in rows)]
    if status.timed_out:
        out.append(f"timed out after {status.waited_seconds:g} s")
    out.append(status.summary())
    return "\n".join(out)


def status(args: argparse.Namespace, progress: Callable[[str], None]) -> Status:
    from cpu_inference.config.loader import load

    if not args.wait and (args.timeout is not None or args.interval is not None):
        raise UserError("--timeout and --interval go with --wait")
    timeout = DEFAULT_TIMEOUT_S if args.timeout is None else args.timeout
    interval = DEFAULT_INTERVAL_S if args.interval is None else args.interval
    if timeout < 0 or interval <= 0:
        raise UserError("--timeout must be ≥ 0 and --interval > 0 seconds")
    config = load(args.config)
    if config.pattern != "model-farm":
        raise UserError(
            f"{args.config}: pattern is {config.pattern}; farm status reads a model-farm config "
            "(its catalog of pooled and dedicated models)"
        )
    catalog = farm_catalog(config)
    if catalog is None:
        raise UserError(
            f"{args.config}: this farm copies no model through its catalog (no pooled model, and its dedicated ones "
            "are vLLM or farm.dedicated_copy: artifact — the deploy waits for those copies)"
        )
    catalog = select(catalog, args.model, config, args.config)
    try:
        s3 = s3_client()
    except _boto_errors() as exc:  # e.g. a profile that does not exist
        raise _aws_error(exc, args.bucket, "create the S3 client") from None
    return poll(s3, args.bucket, catalog, wait=args.wait, timeout=timeout, interval=interval, progress=progress)


def _stderr(line: str) -> None:
    print(line, file=sys.stderr, flush=True)


def run(args: argparse.Namespace) -> int:
    result = status(args, _stderr)
    print(json.dumps(result.to_dict(), indent=2) if args.json else render_table(result))
    return result.exit_code()
