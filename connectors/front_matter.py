"""YAML front matter of Markdown files, read by a YAML parser (issue 13 item 7).

A hand-written `key: value` regex refused valid YAML such as `effective_from: 2026-01-01  # new
rules` (the comment became part of the date). PyYAML's safe loader reads the block now, with three
choices that keep the date rules what they were:

* Timestamps stay text. YAML would turn `2026-01-01` into a date and `2026-13-01` into a raw
  "month must be in 1..12" ValueError, and it reads forms the rest of ragsync refuses
  (`2026-1-5`). Kept as the characters written, every date goes through the one parser
  (`schemas.instants.parse_instant`), so a value means the same instant, and fails with the same
  message, in front matter, HTML meta, webhook pushes and `--as-of`. Date or datetime objects
  (a custom tag a loader might still produce) go through it too.
* A key given twice is an error, not "the last one wins": two `effective_from` lines are two
  claims about when a policy applies, and guessing between them could publish rules early.
* Front matter that is not valid YAML, or not a mapping, is that document's error (ValueError):
  the date may be in the part that cannot be read.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from datetime import date, datetime

import yaml

__all__ = ["FrontMatter", "read_front_matter"]

_BLOCK = re.compile(r"\A\ufeff?---[ \t]*\r?\n(?:(.*?)\r?\n)??(?:---|\.\.\.)[ \t]*(?:\r?\n|\Z)", re.DOTALL)
"""The lazy optional group lets "---\\n---" be an empty block without reaching for a later "---"."""
_MAX_SHOWN = 80


class _Loader(yaml.SafeLoader):
    """Safe loading (no Python objects), timestamps kept as written, duplicate keys refused."""

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[object, object]:
        seen: set[object] = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            folded = key.casefold() if isinstance(key, str) else key
            try:
                duplicate = folded in seen
            except TypeError:  # an unhashable key: let the base class say so
                break
            if duplicate:
                raise yaml.constructor.ConstructorError(None, None, f"key {key!r} is given twice", key_node.start_mark)
            seen.add(folded)
        return super().construct_mapping(node, deep=deep)


def _timestamp_as_text(loader: _Loader, node: yaml.Node) -> object:
    assert isinstance(node, yaml.ScalarNode)
    return loader.construct_scalar(node)


_Loader.add_constructor("tag:yaml.org,2002:timestamp", _timestamp_as_text)


@dataclass(frozen=True, slots=True)
class FrontMatter:
    fields: dict[str, object]  # top-level keys, case folded
    body: str  # the text after the block

    def text(self, key: str) -> str | None:
        """A scalar field as text (`title: 2026` is "2026"); None when absent, empty or not a scalar."""
        value = self.fields.get(key)
        if value is None or isinstance(value, list | dict):
            return None
        if isinstance(value, bool):
            return None
        shown = value.isoformat() if isinstance(value, date | datetime) else str(value)
        return shown.strip() or None


def _where(exc: yaml.YAMLError) -> str:
    mark = getattr(exc, "problem_mark", None)
    # The block starts on the file's second line: YAML's line numbers count from the first line after "---".
    return f" (line {mark.line + 2})" if mark is not None else ""


def _problem(exc: yaml.YAMLError) -> str:
    problem = getattr(exc, "problem", None) or str(exc).splitlines()[0]
    problem = " ".join(str(problem).split())
    return problem if len(problem) <= _MAX_SHOWN else problem[: _MAX_SHOWN - 3] + "..."


def read_front_matter(text: str) -> FrontMatter:
    """The front matter of a Markdown document (empty when it has none). ValueError when unreadable."""
    match = _BLOCK.match(text)
    if match is None:
        return FrontMatter({}, text)
    try:
        data = yaml.load(match.group(1) or "", Loader=_Loader)  # _Loader is a SafeLoader: no Python objects
    except yaml.YAMLError as exc:
        raise ValueError(f"front matter is not valid YAML{_where(exc)}: {_problem(exc)}") from None
    except RecursionError:
        raise ValueError("front matter is nested too deeply to read") from None
    if data is None:
        data = {}
    if not isinstance(data, dict):
        raise ValueError(f"front matter must be `key: value` lines (YAML mapping), not a {type(data).__name__}")
    fields: dict[str, object] = {}
    for key, value in data.items():
        if isinstance(key, str):
            fields[key.casefold()] = value
    return FrontMatter(fields, text[match.end() :])
