#!/usr/bin/env bash
# The demo until the full stack lands: start the local broker (unless one runs), create the
# topics, send a synthetic session through Kafka, show it, and stop the broker if we started it.
set -euo pipefail
cd "$(dirname "$0")/.."
rs=.venv/bin/rollstream
started=0
if ! $rs kafka status >/dev/null 2>&1; then
  $rs kafka start
  started=1
fi
trap '[ $started = 1 ] && $rs kafka stop' EXIT
$rs topics create
$rs smoke --turns 5
echo
echo "The first records on the events topic (rollstream tail events):"
$rs tail events --max-records 3
