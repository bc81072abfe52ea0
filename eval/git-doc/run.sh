#!/usr/bin/env bash
# One command for the Git-manual evaluation: build the corpus, verify the gold, sync, evaluate.
#
#   eval/git-doc/run.sh            full subset (42 pages, 1,926 passages; about two minutes of embedding)
#   eval/git-doc/run.sh --ci       CI subset (15 pages, 430 passages)
#   eval/git-doc/run.sh --ci --min-recall 0.9    extra arguments go to `ragsync eval` (gates)
#
# The steps every set shares (and where data and the report go) are in eval/run_set.sh; this set's own
# build step is build_corpus.py beside this script.
exec "$(dirname "$0")/../run_set.sh" git-doc "$@"
