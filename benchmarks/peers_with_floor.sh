#!/usr/bin/env bash
# ../shared/bench-peers side by side with this project's floor and fleetgate, in one run:
# direct (nginx), the bare pass-through (benchmarks/baseline.py, the floor), Portkey
# (pinned: its streams work) and fleetgate, each on GW_CPU with the same wrk load. Usage:
#   benchmarks/peers_with_floor.sh            # DURATION, REPEAT, CONCS, STREAM_CONC, OUT as there
#   PEER_TARGETS="portkey-pinned litellm" benchmarks/peers_with_floor.sh
set -uo pipefail  # as run_peers.sh: its functions expect no errexit
here=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)
peers=${BENCH_PEERS:-$here/../shared/bench-peers}
[ -d "$peers" ] || { echo "no bench-peers at $peers (set BENCH_PEERS)" >&2; exit 2; }
export OUT=${OUT:-/tmp/bench-peers/floor-$(date -u +%Y%m%d-%H%M%S)}
# shellcheck source=/dev/null
source "$peers/run_peers.sh"
# fleetgate runs from this checkout: compiled first, as pip compiles an installed package
# (with PYTHONDONTWRITEBYTECODE set, each start would compile every module again)
python3 -m compileall -q "$here/src" >/dev/null
bench_setup
run_direct
BENCH_HOST=${BENCH_UPSTREAM%/v1}
GW_VERSION="$(git -C "$here" rev-parse --short HEAD)" GW_NOTES="bare pass-through" \
  bench_gateway floor \
  "env PYTHONPATH=$here python3 -m benchmarks.baseline --port 9100 --upstream $BENCH_HOST --stream-prefix /sse" \
  http://127.0.0.1:9100/v1
for t in ${PEER_TARGETS:-portkey-pinned}; do
  case $t in
    portkey-pinned) run_portkey portkey-pinned "$PEERS/portkey-pinned" "npm override @hono/node-server 1.14.0" ;;
    portkey) run_portkey portkey "$PEERS/portkey" "stock npm install" ;;
    litellm) run_litellm ;;
  esac
done
GW_VERSION="$(git -C "$here" rev-parse --short HEAD)" GW_NOTES="one worker, SQLite request log" \
  bench_gateway fleetgate "bash $here/benchmarks/peers_gateway.sh 9000" http://127.0.0.1:9000/v1
bench_report
