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

A vLLM checkpoint is a directory (config.json, tokenizer files, *.safetensors): PREFIX_COMMAND fetches the snapshot
the copy job sealed at `s3://<bucket>/models/<name>/<commit>/` (model_download/snapshot.py). It reads the prefix's
manifest (`cpu-inference.manifest`, written last: one `<path> <sha256> <size>` line per file), checks the manifest's
own sha256 — MODEL_SHA256 when pinned (ModelArtifact's receipt digest), else the object's `sha256` metadata — then
downloads exactly the files it lists into `<dir>.part/`, checks each file's size and sha256, and renames the
directory into place (MODEL_PATH) only when all of them match. Only s3:GetObject is needed (no listing), an
unsealed prefix (no manifest) is refused, and a restart that kept the emptyDir re-verifies instead of downloading.

The scripts are POSIX sh (the CLI image is Amazon Linux with coreutils); tests run them for real against a
local S3 (moto) with the same environment the manifest carries.
"""

from __future__ import annotations

from model_download.snapshot import MANIFEST_NAME  # the copy job's seal of a snapshot prefix: one definition

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

# A snapshot prefix (vLLM): the manifest is the contract with the copy job (model_download/snapshot.py manifest_text:
# sorted `<path> <sha256> <size>` lines, names without spaces). Paths are checked before they touch the disk: relative,
# no `..` segment, the characters Hub file names use.
PREFIX_SCRIPT = r"""set -eu
fail() { echo "model-fetch: error: $*" >&2; exit 1; }
uri="$MODEL_URI"; dest="${MODEL_PATH%/}"; manifest_name="__MANIFEST__"
case "$uri" in s3://?*/?*/) ;; *) fail "MODEL_URI must be a snapshot prefix s3://<bucket>/<prefix>/ (ending in '/'), got '$uri'" ;; esac
rest=${uri#s3://}; bucket=${rest%%/*}; prefix=${rest#*/}
mkdir -p "$(dirname "$AWS_CONFIG_FILE")" "$(dirname "$dest")"
printf '[default]\ns3 =\n  preferred_transfer_client = crt\n  target_bandwidth = %s\n  max_concurrent_requests = %s\n  multipart_chunksize = 16MB\n' \
  "${MODEL_FETCH_TARGET_BANDWIDTH:-5Gb/s}" "${MODEL_FETCH_CONCURRENCY:-16}" > "$AWS_CONFIG_FILE"
manifest="$dest.manifest"; sums="$dest.sha256"; stage="$dest.part"
rm -f "$manifest.part"
aws s3 cp --only-show-errors "s3://$bucket/$prefix$manifest_name" "$manifest.part" \
  || fail "cannot read s3://$bucket/$prefix$manifest_name: the snapshot is not sealed (the copy job writes its manifest last) or the pod's Pod Identity role may not s3:GetObject it"
want_sha=${MODEL_SHA256:-}
if [ -z "$want_sha" ]; then
  want_sha=$(aws s3api head-object --bucket "$bucket" --key "$prefix$manifest_name" --query 'Metadata.sha256' --output text) \
    || fail "cannot read the metadata of s3://$bucket/$prefix$manifest_name"
fi
printf '%s' "$want_sha" | grep -Eq '^[0-9a-f]{64}$' \
  || fail "no sha256 to verify the manifest against: pin MODEL_SHA256 (the copy's receipt) or give the object a 'sha256' metadata entry (got '$want_sha')"
got_sha=$(sha256sum "$manifest.part" | cut -d' ' -f1)
[ "$got_sha" = "$want_sha" ] || { rm -f "$manifest.part"; fail "sha256 mismatch for s3://$bucket/$prefix$manifest_name: got $got_sha, expected $want_sha"; }
: > "$sums.part"; total=0; count=0
while IFS=' ' read -r path sha size extra; do
  [ -z "$extra" ] && printf '%s' "$sha" | grep -Eq '^[0-9a-f]{64}$' && printf '%s' "$size" | grep -Eq '^[0-9]+$' \
    || fail "s3://$bucket/$prefix$manifest_name is not a snapshot manifest (line '$path $sha $size')"
  case "/$path/" in */../*|*/./*|//*) fail "manifest path '$path' must be relative without '.' or '..' segments" ;; esac
  printf '%s' "$path" | grep -Eq '^[A-Za-z0-9._][A-Za-z0-9._/-]*$' || fail "manifest path '$path' has characters a Hub file name does not"
  printf '%s  %s\n' "$sha" "$path" >> "$sums.part"
  total=$((total + size)); count=$((count + 1))
done < "$manifest.part"
[ "$count" -gt 0 ] || fail "s3://$bucket/$prefix$manifest_name lists no files"
[ -z "${MODEL_SIZE_BYTES:-}" ] || [ "$MODEL_SIZE_BYTES" = "$total" ] \
  || fail "size mismatch for $uri: the manifest lists $total bytes, MODEL_SIZE_BYTES pins $MODEL_SIZE_BYTES"
sizes_ok() {  # every listed file in directory $1 has its listed size
  while IFS=' ' read -r path sha size extra; do
    [ -f "$1/$path" ] && [ "$(stat -c %s "$1/$path")" = "$size" ] || { echo "$path"; return 1; }
  done < "$manifest.part"
}
verified() { sizes_ok "$1" > /dev/null && (cd "$1" && sha256sum -c --quiet --status "$sums.part"); }
if [ -d "$dest" ] && [ -f "$manifest" ] && [ "$(sha256sum "$manifest" | cut -d' ' -f1)" = "$got_sha" ] && verified "$dest"; then
  rm -f "$manifest.part" "$sums.part"; echo "model-fetch: $dest already present and verified ($count files)"; exit 0
fi
rm -rf "$dest" "$stage" "$manifest" "$sums"
start=$(date +%s)
while IFS=' ' read -r path sha size extra; do
  mkdir -p "$(dirname "$stage/$path")"
  aws s3 cp --only-show-errors "s3://$bucket/$prefix$path" "$stage/$path" || { rm -rf "$stage"; fail "download of s3://$bucket/$prefix$path failed"; }
done < "$manifest.part"
bad=$(sizes_ok "$stage") || { rm -rf "$stage"; fail "size mismatch for s3://$bucket/$prefix$bad: not the manifest's size"; }
bad=$(cd "$stage" && sha256sum -c --quiet "$sums.part" 2>/dev/null | cut -d: -f1 | head -n 1) || true
[ -z "$bad" ] || { rm -rf "$stage"; fail "sha256 mismatch for s3://$bucket/$prefix$bad: not the manifest's sha256"; }
mv "$stage" "$dest"; mv "$manifest.part" "$manifest"; mv "$sums.part" "$sums"
echo "model-fetch: $uri -> $dest ($count files, $total bytes, manifest sha256 $got_sha) in $(( $(date +%s) - start ))s"
""".replace("__MANIFEST__", MANIFEST_NAME)

PREFIX_COMMAND = ("/bin/sh", "-c", PREFIX_SCRIPT)
