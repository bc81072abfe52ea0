"""Moved to schemas.text (issue 21): connectors, query and indexer share these words; re-exported here."""

from schemas.text import MAX_QUERY_TERMS as MAX_QUERY_TERMS
from schemas.text import STOPWORDS as STOPWORDS
from schemas.text import html_for_parser as html_for_parser
from schemas.text import normalize as normalize
from schemas.text import numbers_in as numbers_in
from schemas.text import query_terms as query_terms
from schemas.text import word_count as word_count
