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

from collections.abc import Sequence

from cpu_inference._internal.k8s_object import DNS_LABEL
from model_download.catalog import COPY_FAILED_NAME  # the catalog copy's failure marker: one definition
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

# --- LoRA adapters of a dedicated base (issue 26) --------------------------------------------------------------------
# One init container (`adapter-fetch`, after model-fetch) puts every adapter GGUF of the base at
# LORA_DIR/<adapter name>.gguf, verified like the model (size + the object's `sha256` metadata, or the pinned sha256),
# restart-safe (a file already there is re-verified, not downloaded again). Ids are positions of LLAMA_LORA, and the
# entrypoint serves the landed FRONT of that list (inference_runtime/engine_flags.py config_from_env: from the first
# missing file on they are left out), so a file is only ever put in place whole and verified.
#
# An adapter whose catalog copy has not landed yet (its key answers 404) is waited for, polling, up to
# ADAPTER_WAIT_SECONDS counted from the pod's FIRST attempt (a `.since` stamp on the emptyDir survives a restart of
# this container), so neither a slow copy nor a failed one makes the pod crash-loop: past the wait, or at once when
# the catalog's failure marker (catalog.failure_key: <key's directory>/copy-failed.json) is there, or when its bytes
# do not verify, the base starts without it (and without those after it); the gateway answers 503 for those
# (they are missing from GET /lora-adapters) and a restart of the Deployment picks them up once landed. Only a
# failure to READ (no permission, a malformed list) fails the container: that is a deployment error, as for the model.
#
# The list travels as one env value, one `<name> <key> <sha256|->` line per adapter, keys relative to one bucket:
# ~100 bytes an adapter, so 500 adapters stay far below the manifest bound (eks/manifests.DEFAULT_MAX_BYTES).
# Each adapter is one plain GetObject (`aws s3api get-object`: no transfer manager; adapters are 5-50 MB), at most
# ADAPTER_FETCH_CONCURRENCY CLI processes at once: each is a Python process of ~100 MB, so 4 stay inside the
# container's FETCH_MEMORY_LIMIT_MIB.
LORA_DIR = "/models/lora"  # under the model emptyDir (engines.pool_preset.MODEL_DIR), read-only for the engine
ADAPTER_WAIT_SECONDS = 600
ADAPTER_POLL_SECONDS = 15
ADAPTER_FETCH_CONCURRENCY = 4


def adapter_path(name: str, lora_dir: str = LORA_DIR) -> str:
    """Where the adapter `name` lands in the pod: an item of the engine's LLAMA_LORA and the gateway's path for it."""
    return f"{lora_dir.rstrip('/')}/{name}.gguf"


def adapter_lines(adapters: Sequence[tuple[str, str, str | None]]) -> str:
    """LORA_ADAPTERS: `<name> <key> <sha256 or ->` per (name, key, pinned sha256) in id order."""
    return "".join(f"{name} {key} {sha or '-'}\n" for name, key, sha in adapters)


ADAPTERS_SCRIPT = (
    r"""set -eu
fail() { echo "adapter-fetch: error: $*" >&2; exit 1; }
bucket="${LORA_BUCKET:-}"; dir="${LORA_DIR%/}"
wait_s=${LORA_WAIT_SECONDS:-__WAIT__}; poll=${LORA_POLL_SECONDS:-__POLL__}; jobs=${LORA_FETCH_CONCURRENCY:-__JOBS__}
[ -n "$bucket" ] || fail "LORA_BUCKET is empty"
for n in "$wait_s" "$poll" "$jobs"; do printf '%s' "$n" | grep -Eq '^[0-9]+$' || fail "LORA_WAIT_SECONDS, LORA_POLL_SECONDS and LORA_FETCH_CONCURRENCY must be whole numbers, got '$n'"; done
[ "$jobs" -ge 1 ] || jobs=1
mkdir -p "$dir" "$(dirname "$AWS_CONFIG_FILE")"
: > "$AWS_CONFIG_FILE"
list="$dir/.adapters"; printf '%s\n' "${LORA_ADAPTERS:-}" | grep -v '^[[:space:]]*$' > "$list" || true
while IFS=' ' read -r name key pin extra; do
  printf '%s' "$name" | grep -Eq '^__LABEL__$' || fail "adapter name '$name' is not a DNS label (LORA_ADAPTERS line '$name $key $pin')"
  printf '%s' "$key" | grep -Eq '^[A-Za-z0-9._][A-Za-z0-9._/-]*$' || fail "adapter $name: key '$key' has characters a catalog key does not"
  case "/$key/" in */../*|*/./*|//*) fail "adapter $name: key '$key' must not hold '.' or '..' segments" ;; esac
  [ "$pin" = "-" ] || printf '%s' "$pin" | grep -Eq '^[0-9a-f]{64}$' || fail "adapter $name: sha256 must be 64 lowercase hex characters or '-', got '$pin'"
  [ -z "$extra" ] || fail "LORA_ADAPTERS line for $name has more than '<name> <key> <sha256|->'"
done < "$list"
count=$(wc -l < "$list" | tr -d ' ')
[ -f "$dir/.since" ] || date +%s > "$dir/.since"  # the wait's clock: the pod's first attempt, kept across restarts
since=$(cat "$dir/.since")
state="$dir/.state"; rm -rf "$state"; mkdir -p "$state"

verified() {  # file $1 has size $2 and sha256 $3
  [ "$(stat -c %s "$1")" = "$2" ] && printf '%s  %s\n' "$3" "$1" | sha256sum -c --status -
}
absent() { grep -Eq '\((404|NoSuchKey)\)|Not Found' "$1"; }  # the CLI's error for a key that is not there
fetch_one() {  # $1 name, $2 key, $3 pinned sha256 or '-': writes its outcome to $state/$1
  name=$1; key=$2; pin=$3; dest="$dir/$name.gguf"; err="$state/$name.err"
  if [ -f "$dest" ]; then
    if head=$(aws s3api head-object --bucket "$bucket" --key "$key" --query '[ContentLength, Metadata.sha256]' --output text 2> "$err"); then
      size=$(printf '%s' "$head" | cut -f1); sha=$(printf '%s' "$head" | cut -f2); [ "$pin" = "-" ] || sha=$pin
      if verified "$dest" "$size" "$sha"; then echo "landed already present and verified" > "$state/$name"; return 0; fi
    fi
    rm -f "$dest"
  fi
  rm -f "$dest.part"
  if ! got=$(aws s3api get-object --bucket "$bucket" --key "$key" --query '[ContentLength, Metadata.sha256]' --output text "$dest.part" 2> "$err"); then
    rm -f "$dest.part"
    if ! absent "$err"; then echo "error cannot read s3://$bucket/$key (does the pod's Pod Identity role allow s3:GetObject on it?): $(tr '\n' ' ' < "$err")" > "$state/$name"; return 0; fi
    if aws s3api head-object --bucket "$bucket" --key "${key%/*}/__FAILED__" > /dev/null 2>&1; then
      echo "failed its catalog copy failed (s3://$bucket/${key%/*}/__FAILED__)" > "$state/$name"
    else
      echo "missing not copied yet (s3://$bucket/$key)" > "$state/$name"
    fi
    return 0
  fi
  size=$(printf '%s' "$got" | cut -f1); sha=$(printf '%s' "$got" | cut -f2); [ "$pin" = "-" ] || sha=$pin
  if ! printf '%s' "$sha" | grep -Eq '^[0-9a-f]{64}$'; then
    rm -f "$dest.part"; echo "unverified s3://$bucket/$key has no sha256 metadata to verify against" > "$state/$name"; return 0
  fi
  got_size=$(stat -c %s "$dest.part")
  if [ "$got_size" != "$size" ]; then rm -f "$dest.part"; echo "mismatch size mismatch for s3://$bucket/$key: got $got_size bytes, expected $size" > "$state/$name"; return 0; fi
  got_sha=$(sha256sum "$dest.part" | cut -d' ' -f1)
  if [ "$got_sha" != "$sha" ]; then rm -f "$dest.part"; echo "mismatch sha256 mismatch for s3://$bucket/$key: got $got_sha, expected $sha" > "$state/$name"; return 0; fi
  mv "$dest.part" "$dest"
  echo "landed $got_size bytes, sha256 $got_sha" > "$state/$name"
}
outcome() { [ -f "$state/$1" ] && cut -d' ' -f1 "$state/$1" || echo error; }

start=$(date +%s)
while :; do
  n=0
  while IFS=' ' read -r name key pin extra; do
    case "$(outcome "$name")" in landed|failed|mismatch|unverified) continue ;; esac
    rm -f "$state/$name"
    fetch_one "$name" "$key" "$pin" &
    n=$((n + 1)); if [ "$n" -ge "$jobs" ]; then wait; n=0; fi
  done < "$list"
  wait
  waiting=""
  while IFS=' ' read -r name key pin extra; do
    case "$(outcome "$name")" in
      error) fail "adapter $name: $(cut -d' ' -f2- "$state/$name" 2>/dev/null || echo 'its fetch stopped without an outcome')" ;;
      missing) waiting="$waiting $name" ;;
    esac
  done < "$list"
  [ -n "$waiting" ] || break
  left=$((since + wait_s - $(date +%s)))
  [ "$left" -gt 0 ] || break
  echo "adapter-fetch: waiting for adapters still being copied (${left}s left):$waiting"
  sleep "$(( poll < left ? poll : left ))"
done
landed=0; served=0; gap=""
while IFS=' ' read -r name key pin extra; do
  what=$(cut -d' ' -f2- "$state/$name")
  if [ "$(outcome "$name")" = landed ]; then
    landed=$((landed + 1)); [ -n "$gap" ] || served=$((served + 1))
    echo "adapter-fetch: $name: $what"
  else
    [ -n "$gap" ] || gap=$name
    echo "adapter-fetch: warning: $name is not served: $what" >&2
  fi
done < "$list"
[ -z "$gap" ] || echo "adapter-fetch: warning: the engine serves the first $served adapter(s) of $count, up to $gap (ids are positions); the rest answer 503 at the gateway until a restart of the pod finds them landed" >&2
echo "adapter-fetch: $landed of $count adapter(s) in $dir in $(( $(date +%s) - start ))s"
""".replace("__WAIT__", str(ADAPTER_WAIT_SECONDS))
    .replace("__POLL__", str(ADAPTER_POLL_SECONDS))
    .replace("__JOBS__", str(ADAPTER_FETCH_CONCURRENCY))
    .replace("__FAILED__", COPY_FAILED_NAME)
    .replace("__LABEL__", DNS_LABEL.pattern)  # the one label pattern (an ERE as written)
)

ADAPTERS_COMMAND = ("/bin/sh", "-c", ADAPTERS_SCRIPT)
