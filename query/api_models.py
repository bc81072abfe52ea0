"""The request and response bodies of the HTTP API (query.api): pydantic models that validate each
request and from which the OpenAPI document is generated.

AskRequest forbids every field but question and as_of: who is asking comes only from the session
token, never from the body (query.api checks the token before it reads the body).
"""

from __future__ import annotations

from datetime import datetime
from typing import Annotated, Literal

from pydantic import BaseModel, BeforeValidator, ConfigDict, Field, WithJsonSchema

from query.as_of import AS_OF_FORM, parse_as_of

MAX_QUESTION_CHARS = 4000


def _as_of(value: object) -> object:
    return None if value is None else parse_as_of(value)


AsOf = Annotated[
    datetime | None,
    BeforeValidator(_as_of),
    WithJsonSchema(
        {
            "anyOf": [
                {"type": "string", "format": "date"},
                {"type": "string", "format": "date-time"},
                {"type": "null"},
            ],
            "description": f"Answer as of this instant: {AS_OF_FORM}. A date means midnight UTC; "
            "a datetime without an offset is UTC. Default: now.",
            "examples": ["2026-03-01", "2026-03-01T09:30:00+01:00"],
        }
    ),
]


class AskRequest(BaseModel):
    """The whole request body. extra="forbid": scope comes from the token, never from the body."""

    model_config = ConfigDict(
        extra="forbid",
        frozen=True,
        strict=True,
        str_strip_whitespace=True,
        json_schema_extra={"examples": [{"question": "How many days do customers have to request a refund?"}]},
    )

    question: str = Field(min_length=1, max_length=MAX_QUESTION_CHARS, description="The user's question.")
    as_of: AsOf = None


class Claim(BaseModel):
    statement: str
    quote: str = Field(description="Verbatim text of the cited passage.")
    passage_id: str = Field(description="doc@version#anchor")
    source_url: str = Field(
        description="Where to open the source; a PDF passage's URL opens at its page (#page=3), "
        "a CSV/TSV row's at its row (#row=12)."
    )
    location: str | None = Field(
        default=None, description='The page or row the quote is on ("page 3", "row 12"), when the format numbers them.'
    )


class AskResponse(BaseModel):
    """An answer whose every claim quotes a passage the asker may read, or the one generic abstention."""

    answered: bool
    answer: str | None
    claims: list[Claim]
    message: str | None = Field(description="The generic abstention message when answered is false.")


class ErrorResponse(BaseModel):
    error: str


class Problem(BaseModel):
    field: str = Field(description="Where in the body, e.g. as_of.")
    error: str = Field(description="A stable error kind, e.g. missing, string_type, value_error.")
    message: str = Field(description="What is wrong, for a person.")


class InvalidRequestResponse(BaseModel):
    error: Literal["invalid request"]
    message: str
    problems: list[Problem]
