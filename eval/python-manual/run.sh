#!/usr/bin/env bash
# One command for the Python-manual evaluation: build the corpus, verify the gold, sync, evaluate.
#
#   eval/python-manual/run.sh            full subset (~2,100 passages; a few minutes of embedding)
#   eval/python-manual/run.sh --ci       CI subset (~400 passages)
#   eval/python-manual/run.sh --ci --min-recall 0.9    extra arguments go to `ragsync eval` (gates)
#
# The steps every set shares (and where data and the report go) are in eval/run_set.sh; this set's own
# build step is build_corpus.py beside this script.
exec "$(dirname "$0")/../run_set.sh" python-manual "$@"
