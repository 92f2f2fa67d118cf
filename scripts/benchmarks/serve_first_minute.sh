#!/usr/bin/env bash
# What `simcse serve` (no arguments) answers right after it starts: seconds until the page answers, then
# /api/health and a search while the default corpus is still being indexed, and /api/health again 30 s later.
# Usage: bash scripts/benchmarks/serve_first_minute.sh [PORT [SIMCSE_SERVE_OPTION...]]   (needs curl; with no
# options, the default model package and wiki file). LATER (default 30) is the wait in seconds before the last check.
set -euo pipefail
port=${1:-8791}
shift $(( $# > 0 ? 1 : 0 ))
url="http://127.0.0.1:$port"
start=$(date +%s.%N)
python -m simcse serve --port "$port" "$@" 2> serve_first_minute.err &
pid=$!
trap 'kill -INT $pid 2>/dev/null; wait $pid 2>/dev/null || true' EXIT
until [ "$(curl -s -o /dev/null -w '%{http_code}' "$url/" || true)" = 200 ]; do
  kill -0 $pid 2>/dev/null || { echo "simcse serve exited:"; cat serve_first_minute.err; exit 1; }
  sleep 0.2
done
echo "page after $(python -c "print(round($(date +%s.%N) - $start, 1))") s"
curl -s -w ' (HTTP %{http_code})\n' "$url/api/health"
curl -s -w ' (HTTP %{http_code})\n' "$url/api/search?query=A+man+is+playing+a+guitar."
sleep "${LATER:-30}"
curl -s -w ' (HTTP %{http_code})\n' "$url/api/health"
