#!/usr/bin/env bash
# Installs ragsync with its cluster and dev extras, starts the real local services the tests
# use (Kafka, Elasticsearch, Redis and the Qdrant server), runs lint, types and the suite.
set -euo pipefail
cd "$(dirname "$0")/.."

python3 -m pip install --quiet --disable-pip-version-check -e '.[cluster,dev]'

compose/local/services up all
trap 'compose/local/services down all >/dev/null 2>&1 || true' EXIT

ruff check .
mypy
RAGSYNC_REQUIRE_SERVICES=1 python3 -m pytest -q -p no:cacheprovider "$@"
