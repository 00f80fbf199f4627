"""The init container that puts a model on the pod's disk before llama-server starts.

It runs the AWS CLI v2 image with the CRT transfer client (`preferred_transfer_client = crt`: parallel
ranged GETs, retried per part; `target_bandwidth` sets its connection count; its buffer pool is capped with
AWS_CRT_S3_MEMORY_LIMIT_IN_GIB, see CRT_MEMORY_LIMIT_GIB; the classic client's `max_concurrent_requests`
applies when CRT is unavailable), credentials from EKS Pod Identity (the
CLI's container credential provider reads the agent's URI and token file the Pod Identity webhook injects).
The file lands as `<name>.part` in an emptyDir and becomes `<name>` only after its size and sha256 match:
the engine never sees a truncated or altered model. Expected values come from the props — for a ModelArtifact,
MODEL_SHA256 is the digest its copy verified (a CloudFormation attribute) and MODEL_URI its commit-pinned key,
so every pod checks for the bytes the first one got — or else from the object itself (`ContentLength` and the
`sha256` metadata the ModelArtifact copy job writes after verifying the Hub's digest). A restart of the pod's
sandbox that keeps the emptyDir re-verifies the file and skips the download.

The script is POSIX sh (the CLI image is Amazon Linux with coreutils); tests run it for real against a
local S3 (moto) with the same environment the manifest carries.
"""

from __future__ import annotations

# The CRT client's buffer pool: without a limit it sizes itself from the throughput target — 2 GiB at the
# 5 Gb/s configured here (awscrt 0.36.0, the version AWS CLI 2.36.x pins, logs "memory_limit=2147483648";
# its docs: "between 2GiB and 24GiB"), over any sane init-container limit. CLI v2 has no s3 setting for it
# (awscli/customizations/s3/factory.py _create_crt_client passes none), but aws-c-s3 reads
# AWS_CRT_S3_MEMORY_LIMIT_IN_GIB when the client is given no limit, and refuses less than 1 GiB
# (AWS_ERROR_S3_INVALID_MEMORY_LIMIT_CONFIG). So: the minimum pool, plus room for the CLI process itself.
CRT_MEMORY_LIMIT_GIB = 1
FETCH_MEMORY_LIMIT_MIB = 1536  # container limit: the 1 GiB pool + the CLI's Python and CRT overhead

# AWS CLI v2 (bundles the CRT) on public ECR, multi-arch. Pin a digest in production:
# `crane digest public.ecr.aws/aws-cli/aws-cli:<tag>` and pass image@sha256:... as downloader_image.
DEFAULT_DOWNLOADER_IMAGE = "public.ecr.aws/aws-cli/aws-cli:2.36.15"

SCRIPT = r"""set -eu
fail() { echo "model-fetch: error: $*" >&2; exit 1; }
uri="$MODEL_URI"; dest="$MODEL_PATH"
case "$uri" in s3://?*/?*) ;; *) fail "MODEL_URI must be s3://<bucket>/<key>, got '$uri'" ;; esac
rest=${uri#s3://}; bucket=${rest%%/*}; key=${rest#*/}
mkdir -p "$(dirname "$AWS_CONFIG_FILE")" "$(dirname "$dest")"
printf '[default]\ns3 =\n  preferred_transfer_client = crt\n  target_bandwidth = %s\n  max_concurrent_requests = %s\n  multipart_chunksize = 16MB\n' \
  "${MODEL_FETCH_TARGET_BANDWIDTH:-5Gb/s}" "${MODEL_FETCH_CONCURRENCY:-16}" > "$AWS_CONFIG_FILE"
want_sha=${MODEL_SHA256:-}; want_size=${MODEL_SIZE_BYTES:-}
if [ -z "$want_sha" ] || [ -z "$want_size" ]; then
  head=$(aws s3api head-object --bucket "$bucket" --key "$key" --query '[ContentLength, Metadata.sha256]' --output text) \
    || fail "cannot read s3://$bucket/$key (does the pod's Pod Identity role allow s3:GetObject on it?)"
  [ -n "$want_size" ] || want_size=$(printf '%s' "$head" | cut -f1)
  [ -n "$want_sha" ] || want_sha=$(printf '%s' "$head" | cut -f2)
fi
printf '%s' "$want_sha" | grep -Eq '^[0-9a-f]{64}$' \
  || fail "no sha256 to verify against: pin MODEL_SHA256 or give the object a 'sha256' metadata entry (got '$want_sha')"
printf '%s' "$want_size" | grep -Eq '^[0-9]+$' || fail "MODEL_SIZE_BYTES must be a byte count, got '$want_size'"
verified() { [ "$(stat -c %s "$1")" = "$want_size" ] && printf '%s  %s\n' "$want_sha" "$1" | sha256sum -c --status -; }
if [ -f "$dest" ] && verified "$dest"; then echo "model-fetch: $dest already present and verified"; exit 0; fi
rm -f "$dest" "$dest.part"
start=$(date +%s)
aws s3 cp --only-show-errors "$uri" "$dest.part" || fail "download of $uri failed"
got_size=$(stat -c %s "$dest.part")
[ "$got_size" = "$want_size" ] || { rm -f "$dest.part"; fail "size mismatch for $uri: got $got_size bytes, expected $want_size"; }
got_sha=$(sha256sum "$dest.part" | cut -d' ' -f1)
[ "$got_sha" = "$want_sha" ] || { rm -f "$dest.part"; fail "sha256 mismatch for $uri: got $got_sha, expected $want_sha"; }
mv "$dest.part" "$dest"
echo "model-fetch: $uri -> $dest ($got_size bytes, sha256 $got_sha) in $(( $(date +%s) - start ))s"
"""

COMMAND = ("/bin/sh", "-c", SCRIPT)
