"""The copy job's contract with CodeBuild: the buildspec it runs and the receipt it exports.

The job pins the object to the commit the Hub resolved the revision to and reports where it landed as CodeBuild
exported variables (buildspec `env.exported-variables`; BatchGetBuilds returns them in
`builds[].exportedEnvironmentVariables[{name, value}]`, their values fixed once the build's last phase ends).
The isComplete handler turns them into the custom resource's attributes (Commit, Sha256, Key, Prefix, Size) —
no extra S3 object, no extra permission for the handler.

The receipt goes through a file because the exported values have to be variables of the build's own shell: the
job writes `NAME='value'` lines and the same command entry sources them (`set -a; . file`)."""

from __future__ import annotations

import shlex
from pathlib import Path

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


# -- catalog mode: one job for every pooled model of a stack ----------------------------------------------

CATALOG_RECEIPT_FILE = "catalog-receipt.env"

# Exported variable → custom-resource attribute (Custom::ModelCatalog).
CATALOG_RECEIPT = {
    "CATALOG_RECEIPT_KEY": "ReceiptKey",
    "CATALOG_FINGERPRINT": "Fingerprint",
    "CATALOG_MODELS": "Models",
    "CATALOG_COPIED": "Copied",
}

CATALOG_BUILD_SPEC = {
    "version": "0.2",
    "env": {"shell": "bash", "exported-variables": list(CATALOG_RECEIPT)},
    "phases": {
        "install": INSTALL,
        "build": {
            "commands": [
                'python3 -m model_download catalog --catalog "s3://$CATALOG_BUCKET/$CATALOG_KEY"'
                ' --fingerprint "$CATALOG_FINGERPRINT" --bucket "$MODEL_BUCKET" --endpoint "$HF_ENDPOINT"'
                ' --parallel-models "$CATALOG_PARALLEL_MODELS" --concurrency "$MODEL_CONCURRENCY"'
                f" --receipt-env {CATALOG_RECEIPT_FILE} && set -a && . ./{CATALOG_RECEIPT_FILE} && set +a",
            ]
        },
    },
}


def write_catalog_receipt(path: str | Path, *, receipt_key: str, fingerprint: str, models: int, copied: int) -> None:
    values = {
        "CATALOG_RECEIPT_KEY": receipt_key,
        "CATALOG_FINGERPRINT": fingerprint,
        "CATALOG_MODELS": str(models),
        "CATALOG_COPIED": str(copied),
    }
    assert set(values) == set(CATALOG_RECEIPT)
    Path(path).write_text("".join(f"{name}={shlex.quote(value)}\n" for name, value in values.items()))


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
