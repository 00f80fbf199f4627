"""The copy job's contract with CodeBuild: the buildspec it runs and the receipt it exports.

The job pins the object to the commit the Hub resolved the revision to and reports where it landed as CodeBuild
exported variables (buildspec `env.exported-variables`; BatchGetBuilds returns them in
`builds[].exportedEnvironmentVariables[{name, value}]`, their values fixed once the build's last phase ends).
The isComplete handler turns them into the custom resource's attributes (Commit, Sha256, Key, Prefix, Size) —
no extra S3 object, no extra permission for the handler.

The receipt goes through a file because the exported values have to be variables of the build's own shell: the
job writes `NAME='value'` lines and the same command entry sources them (`set -a; . file`)."""

from __future__ import annotations

import copy
import shlex
from collections.abc import Iterable
from pathlib import Path
from typing import Any

from .catalog import CatalogEntry
from .copy import COMMIT, CopyResult
from .errors import DownloadError

RECEIPT_FILE = "model-receipt.env"  # in the build's working directory (the job's source root)

# Exported variable → custom-resource attribute.
RECEIPT = {
    "MODEL_RESOLVED_COMMIT": "Commit",
    "MODEL_RESOLVED_SHA256": "Sha256",
    "MODEL_RESOLVED_KEY": "Key",
    "MODEL_RESOLVED_SIZE": "Size",
}

# Install boto3 only when the image lacks it (the job needs boto3 + urllib3, nothing else). One command entry
# runs the copy and loads its receipt into the shell, so the export never depends on state between entries.
INSTALL = {
    "commands": [
        "python3 -c 'import boto3, urllib3' 2>/dev/null || python3 -m pip install --quiet --disable-pip-version-check 'boto3>=1.35,<2'",
    ]
}
BUILD_SPEC = {
    "version": "0.2",
    "env": {"shell": "bash", "exported-variables": list(RECEIPT)},
    "phases": {
        "install": INSTALL,
        "build": {
            "commands": [
                'python3 -m model_download --repo "$MODEL_REPO" --file "$MODEL_FILE" --revision "$MODEL_REVISION"'
                ' --bucket "$MODEL_BUCKET" --key-prefix "$MODEL_KEY_PREFIX" --pin-commit --endpoint "$HF_ENDPOINT"'
                ' --concurrency "$MODEL_CONCURRENCY" ${MODEL_SHA256:+--sha256 "$MODEL_SHA256"}'
                ' ${HF_TOKEN_SECRET_NAME:+--token-secret "$HF_TOKEN_SECRET_NAME"}'
                f" --receipt-env {RECEIPT_FILE} && set -a && . ./{RECEIPT_FILE} && set +a",
            ]
        },
    },
}


def receipt(result: CopyResult) -> dict[str, str]:
    """The exported variables for one finished (or already present) copy."""
    if not (result.commit and COMMIT.match(result.commit)):
        raise DownloadError(f"no pinned commit for s3://{result.bucket}/{result.key}: a receipt needs --pin-commit")
    values = {
        "MODEL_RESOLVED_COMMIT": result.commit,
        "MODEL_RESOLVED_SHA256": result.sha256,
        "MODEL_RESOLVED_KEY": result.key,
        "MODEL_RESOLVED_SIZE": str(result.size),
    }
    assert set(values) == set(RECEIPT)
    return values


def write_receipt(path: str | Path, result: CopyResult) -> None:
    Path(path).write_text("".join(f"{name}={shlex.quote(value)}\n" for name, value in receipt(result).items()))


# -- catalog mode: one batch of a farm's pooled models per build ------------------------------------------------

# The state machine's override naming one batch's entries: a JSON array of names (Step Functions'
# States.JsonToString of the batch's Items). Unset: the build copies the whole catalog (`aws codebuild start-build`
# by hand). The catalog's location and fingerprint come with it as overrides, so a batch always reads the catalog
# its execution was started for, whatever the project's environment says by then.
CATALOG_NAMES_ENV = "CATALOG_NAMES"

# No exported variables: nothing waits for a catalog build's receipt any more (the deploy only starts the copy);
# the outcome is in S3 (the models' keys, the failure markers) and in the execution's per-batch results.
CATALOG_BUILD_SPEC = {
    "version": "0.2",
    "env": {"shell": "bash"},
    "phases": {
        "install": INSTALL,
        "build": {
            "commands": [
                'python3 -m model_download catalog --catalog "s3://$CATALOG_BUCKET/$CATALOG_KEY"'
                ' --fingerprint "$CATALOG_FINGERPRINT" --bucket "$MODEL_BUCKET" --endpoint "$HF_ENDPOINT"'
                ' --parallel-models "$CATALOG_PARALLEL_MODELS" --concurrency "$MODEL_CONCURRENCY"'
                f' ${{{CATALOG_NAMES_ENV}:+--names "${CATALOG_NAMES_ENV}"}}',
            ]
        },
    },
}

# Where a catalog with PEFT adapters sets up the pin's converter (peft_convert.setup: ~1.1 GB, torch included).
PEFT_CONVERT_DIR = "/tmp/peft-convert"


def catalog_build_spec(entries: Iterable[CatalogEntry]) -> dict[str, Any]:
    """The catalog project's buildspec: CATALOG_BUILD_SPEC itself unless an entry is a PEFT adapter (CatalogEntry.peft)
    or has one in its `lora` bundle (CatalogAdapter.peft); then the install phase also selects the python the
    converter's lock is for (buildspec `runtime-versions`,
    https://docs.aws.amazon.com/codebuild/latest/userguide/build-spec-ref.html#build-spec.phases.install.runtime-versions)
    and sets up the converter (peft_convert.setup), whose directory the build finds in PEFT_CONVERT_ENV. Every batch
    of such a catalog pays the setup (a few minutes), so catalogs without PEFT adapters never do."""
    from .peft_convert import ENV_DIR_ENV, PYTHON_VERSION

    if not any(e.peft or any(a.peft for a in e.adapters or ()) for e in entries):
        return CATALOG_BUILD_SPEC
    spec: dict[str, Any] = copy.deepcopy(CATALOG_BUILD_SPEC)
    spec["env"]["variables"] = {ENV_DIR_ENV: PEFT_CONVERT_DIR}
    spec["phases"]["install"] = {
        "runtime-versions": {"python": PYTHON_VERSION},
        "commands": [
            *INSTALL["commands"],
            f'python3 -m model_download.peft_convert setup "${ENV_DIR_ENV}"',
        ],
    }
    return spec


# -- snapshot mode: a vLLM model's safetensors repo (ModelArtifactProps(snapshot=True)) ----------------------

SNAPSHOT_RECEIPT_FILE = "snapshot-receipt.env"

# Exported variable → custom-resource attribute. Key is the prefix `models/<name>/<commit>/`; Sha256 is the
# manifest's digest (`<prefix>cpu-inference.manifest`, sorted `path sha256 size` lines); Files its line count.
SNAPSHOT_RECEIPT = {
    "MODEL_RESOLVED_COMMIT": "Commit",
    "MODEL_RESOLVED_SHA256": "Sha256",
    "MODEL_RESOLVED_KEY": "Key",
    "MODEL_RESOLVED_SIZE": "Size",
    "MODEL_RESOLVED_FILES": "Files",
}

SNAPSHOT_BUILD_SPEC = {
    "version": "0.2",
    "env": {"shell": "bash", "exported-variables": list(SNAPSHOT_RECEIPT)},
    "phases": {
        "install": INSTALL,
        "build": {
            "commands": [
                'python3 -m model_download snapshot --repo "$MODEL_REPO" --revision "$MODEL_REVISION"'
                ' --bucket "$MODEL_BUCKET" --key-prefix "$MODEL_KEY_PREFIX" --endpoint "$HF_ENDPOINT"'
                ' --concurrency "$MODEL_CONCURRENCY" ${HF_TOKEN_SECRET_NAME:+--token-secret "$HF_TOKEN_SECRET_NAME"}'
                f" --receipt-env {SNAPSHOT_RECEIPT_FILE} && set -a && . ./{SNAPSHOT_RECEIPT_FILE} && set +a",
            ]
        },
    },
}


def write_snapshot_receipt(path: str | Path, *, commit: str, sha256: str, prefix: str, size: int, files: int) -> None:
    values = {
        "MODEL_RESOLVED_COMMIT": commit,
        "MODEL_RESOLVED_SHA256": sha256,
        "MODEL_RESOLVED_KEY": prefix,
        "MODEL_RESOLVED_SIZE": str(size),
        "MODEL_RESOLVED_FILES": str(files),
    }
    assert set(values) == set(SNAPSHOT_RECEIPT)
    Path(path).write_text("".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items()))


def catalog_environment(
    *,
    bucket: str,
    catalog_bucket: str,
    catalog_key: str,
    fingerprint: str,
    hf_endpoint: str | None = None,
    parallel_models: int | None = None,
    concurrency: int | None = None,
) -> list[dict[str, str]]:
    """The catalog project's environment (names and locations only, never a secret's value): with it alone,
    `aws codebuild start-build` copies the whole catalog; each batch of the state machine overrides
    CATALOG_NAMES_ENV and the catalog's location and fingerprint."""
    from .build_job import plaintext_environment
    from .catalog_copy import DEFAULT_CONCURRENCY, DEFAULT_PARALLEL_MODELS
    from .hub import DEFAULT_ENDPOINT

    return plaintext_environment(
        {
            "MODEL_BUCKET": bucket,
            "CATALOG_BUCKET": catalog_bucket,
            "CATALOG_KEY": catalog_key,
            "CATALOG_FINGERPRINT": fingerprint,
            "HF_ENDPOINT": hf_endpoint or DEFAULT_ENDPOINT,
            "CATALOG_PARALLEL_MODELS": str(parallel_models or DEFAULT_PARALLEL_MODELS),
            "MODEL_CONCURRENCY": str(concurrency or DEFAULT_CONCURRENCY),
        }
    )
