#!/usr/bin/env bash
# Prometheus' promtool (rule checks and `promtool test rules`, which the farm's alert tests run) from Debian's
# `prometheus` package, EXTRACTED into the cache rather than installed: no service, no postinst, no system change.
# Prints the binary's path. A re-run with the binary in place is a no-op.
set -euo pipefail
# shellcheck source=scripts/cache_lib.sh
. "$(dirname "$0")/cache_lib.sh"  # $cache
dest="$cache/promtool"
if [ ! -x "$dest/usr/bin/promtool" ]; then
  work=$(mktemp -d)
  trap 'rm -rf "$work"' EXIT
  # `apt-get download` needs the package lists; a fresh container has none until `apt-get update` (root).
  (cd "$work" && apt-get download -qq prometheus 2>/dev/null) \
    || { apt-get update -qq >/dev/null && (cd "$work" && apt-get download -qq prometheus); }
  rm -rf "$dest.part" && mkdir -p "$dest.part"
  dpkg-deb -x "$work"/prometheus_*.deb "$dest.part"
  rm -rf "$dest" && mv "$dest.part" "$dest"
fi
"$dest/usr/bin/promtool" --version >/dev/null
echo "$dest/usr/bin/promtool"
