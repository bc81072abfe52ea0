#!/usr/bin/env bash
# One command for the flex-manual evaluation: build the corpus, verify the gold, sync, evaluate.
#
#   eval/flex-doc/run.sh            full subset (118 pages, 472 passages)
#   eval/flex-doc/run.sh --ci       CI subset (25 pages, 143 passages)
#   eval/flex-doc/run.sh --ci --min-recall 0.9    extra arguments go to `ragsync eval` (gates)
#
# The steps every set shares (and where data and the report go) are in eval/run_set.sh; this set's own
# build step is build_corpus.py beside this script.
exec "$(dirname "$0")/../run_set.sh" flex-doc "$@"
