#!/usr/bin/env bash
# One command for the SQLite documentation evaluation: build the corpus, verify the gold, sync, evaluate.
#
#   eval/sqlite-doc/run.sh            full subset (51 pages)
#   eval/sqlite-doc/run.sh --ci       CI subset (16 pages)
#   eval/sqlite-doc/run.sh --ci --min-recall 0.9    extra arguments go to `ragsync eval` (gates)
#
# Data goes to eval/sqlite-doc/build/<variant>/ (gitignored): corpus/, questions.jsonl, corpus.json (package
# version) and the embedded profile's home/ (override with RAGSYNC_HOME). Re-runs re-index nothing unchanged.
# The JSON report goes to bench/results/eval-sqlite-doc[-ci].json; exit status is the eval's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
name="$(basename "$here")"
variant=full
suffix=""
if [[ "${1:-}" == "--ci" ]]; then
    variant=ci
    suffix="-ci"
    shift
fi
out="$here/build/$variant"
export RAGSYNC_HOME="${RAGSYNC_HOME:-$out/home}"
export RAGSYNC_PROFILE="${RAGSYNC_PROFILE:-embedded}"
cd "$repo"

python3 "$here/build_corpus.py" --variant "$variant" --out "$out"
python3 "$here/verify_gold.py" "$out/questions.jsonl" --corpus "$out/corpus" --passages
start=$(date +%s)
python3 -m ragsync.cli sync "$out/corpus" --tenant sqlapp --tenant sqlcli --json >"$out/sync.json"
echo "sync: $(($(date +%s) - start))s $(tr -d '\n ' <"$out/sync.json")"
mkdir -p bench/results
python3 -m ragsync.cli eval "$out/questions.jsonl" --out "bench/results/eval-$name$suffix.json" "$@"
