#!/usr/bin/env bash
# Start fleetgate for ../shared/bench-peers/run_peers.sh (its OWN_GATEWAY_CMD hook):
# routes bench-model -> $BENCH_UPSTREAM and bench-model-stream -> $BENCH_UPSTREAM_SSE,
# with the same model names upstream, as the peers are configured. Usage:
#   OWN_GATEWAY_CMD="bash $PWD/benchmarks/peers_gateway.sh 9000" \
#   OWN_GATEWAY_URL=http://127.0.0.1:9000/v1 ../shared/bench-peers/run_peers.sh
# It runs this checkout's source: compile it first (`python3 -m compileall -q src`, as
# peers_with_floor.sh does), or a start compiles every module where PYTHONDONTWRITEBYTECODE
# is set.
set -euo pipefail
port=${1:-9000}
dir=$(mktemp -d /tmp/fleetgate-peers.XXXXXX)
cat >"$dir/fleet.yaml" <<YAML
providers:
  - {id: bench, kind: openai, base_url: "${BENCH_UPSTREAM:?}"}
  - {id: bench-sse, kind: openai, base_url: "${BENCH_UPSTREAM_SSE:?}"}
deployments:
  - {id: bench, model: bench-model, provider: bench}
  - {id: bench-sse, model: bench-model-stream, provider: bench-sse}
YAML
export FLEETGATE_DATA_DIR="$dir/data"
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
export PYTHONPATH="$here/src${PYTHONPATH:+:$PYTHONPATH}"
exec python3 -m fleetgate serve --config "$dir/fleet.yaml" --host 127.0.0.1 --port "$port"
