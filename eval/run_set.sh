#!/usr/bin/env bash
# One command for any evaluation set: build the corpus, verify the gold, sync, evaluate.
#
#   eval/run_set.sh <set>                  full set, e.g. eval/run_set.sh git-doc
#   eval/run_set.sh <set> --ci             the set's CI subset
#   eval/run_set.sh <set> --ci --min-recall 0.9    extra arguments go to `ragsync eval` (gates)
#
# Each set keeps its own build step (eval/<set>/build_corpus.py and verify_gold.py); the tenants it
# syncs are in the table below. Data goes to eval/<set>/build/<variant>/ (gitignored): corpus/,
# questions.jsonl, corpus.json (package version, where the set writes one) and the embedded profile's
# home/ (override with RAGSYNC_HOME). Re-runs re-index nothing unchanged. The JSON report goes to
# bench/results/eval-<set>[-ci].json (a later `--out` among the extra arguments wins); exit status is
# the eval's.
set -euo pipefail
name="${1:?usage: eval/run_set.sh <set> [--ci] [ragsync eval arguments]}"
shift
repo="$(cd "$(dirname "$0")/.." && pwd)"
here="$repo/eval/$name"
case "$name" in
    python-manual) sync_args=(--tenant pydocs --tenant pyschool --source corpus) ;;
    git-doc) sync_args=(--tenant gitdocs --tenant gitschool --source corpus) ;;
    flex-doc) sync_args=(--tenant lexdocs --tenant lexfaq) ;;
    sqlite-doc) sync_args=(--tenant sqlapp --tenant sqlcli) ;;
    debian-handbook) sync_args=(--tenant hbadmin --tenant hbdesk) ;;
    *) echo "eval/run_set.sh: unknown set '$name' (python-manual, git-doc, flex-doc, sqlite-doc, debian-handbook)" >&2; exit 2 ;;
esac
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
python3 -m ragsync.cli sync "$out/corpus" "${sync_args[@]}" --json >"$out/sync.json"
echo "sync: $(($(date +%s) - start))s $(tr -d '\n ' <"$out/sync.json")"
mkdir -p bench/results
python3 -m ragsync.cli eval "$out/questions.jsonl" --out "bench/results/eval-$name$suffix.json" "$@"
