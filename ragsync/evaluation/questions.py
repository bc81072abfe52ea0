"""The question file: one JSON object per line, validated at the boundary so a bad line names itself."""

from __future__ import annotations

import json
from collections.abc import Iterable
from datetime import datetime
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from schemas.principal import Principal


class GoldSpan(BaseModel):
    """A passage is gold when it belongs to doc_id and contains quote (whitespace and case folded)."""

    model_config = ConfigDict(extra="forbid", frozen=True)

    doc_id: str = Field(min_length=1)
    quote: str = Field(min_length=1)
    tenant: str | None = None
    """Only needed when the gold lives in another tenant than the asker's (cross-tenant leak checks)."""


class EvalQuestion(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    id: str = Field(min_length=1)
    question: str = Field(min_length=1)
    principal: Principal
    expect: Literal["answer", "abstain"]
    type: str = "untyped"
    gold: tuple[GoldSpan, ...] = ()
    as_of: datetime | None = None
    note: str = ""


class QuestionFileError(ValueError):
    pass


def parse_questions(lines: Iterable[str], source: str = "<questions>") -> list[EvalQuestion]:
    """One JSON object per line; blank lines and lines starting with '#' are skipped.

    Errors name the line, and duplicate ids are refused, because a report keyed by id is useless
    when two questions share one.
    """
    out: list[EvalQuestion] = []
    seen: set[str] = set()
    errors: list[str] = []
    for number, line in enumerate(lines, 1):
        text = line.strip()
        if not text or text.startswith("#"):
            continue
        try:
            question = EvalQuestion.model_validate(json.loads(text))
        except (json.JSONDecodeError, ValidationError) as exc:
            errors.append(f"{source}:{number}: {str(exc).splitlines()[0]}")
            continue
        if question.id in seen:
            errors.append(f"{source}:{number}: duplicate id {question.id!r}")
        if question.expect == "answer" and not question.gold:
            errors.append(f"{source}:{number}: expect=answer needs at least one gold span")
        seen.add(question.id)
        out.append(question)
    if errors:
        raise QuestionFileError("\n".join(errors))
    return out


def load_questions(path: Path) -> list[EvalQuestion]:
    with path.open(encoding="utf-8") as handle:
        return parse_questions(handle, str(path))
