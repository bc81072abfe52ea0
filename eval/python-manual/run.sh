#!/usr/bin/env bash
# One command for the Python-manual evaluation: build the corpus, verify the gold, sync, evaluate.
#
#   eval/python-manual/run.sh            full subset (~2,100 passages; a few minutes of embedding)
#   eval/python-manual/run.sh --ci       CI subset (~400 passages)
#   eval/python-manual/run.sh --ci --min-recall 0.9    extra arguments go to `ragsync eval` (gates)
#
# Data goes to eval/python-manual/build/<variant>/ (gitignored): corpus/, questions.jsonl and the
# embedded profile's home/ (override with RAGSYNC_HOME). Re-runs re-index nothing unchanged.
# The JSON report goes to bench/results/eval-python-manual[-ci].json; exit status is the eval's.
set -euo pipefail
here="$(cd "$(dirname "$0")" && pwd)"
repo="$(cd "$here/../.." && pwd)"
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
python3 -m ragsync.cli sync "$out/corpus" --tenant pydocs --tenant pyschool --source corpus --json >"$out/sync.json"
echo "sync: $(($(date +%s) - start))s $(tr -d '\n ' <"$out/sync.json")"
mkdir -p bench/results
python3 -m ragsync.cli eval "$out/questions.jsonl" --out "bench/results/eval-python-manual$suffix.json" "$@"
