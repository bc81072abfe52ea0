"""The errors that cross layers, as one family (like httpx's `_exceptions.py`): what a caller may catch.

Two kinds, because they call for opposite handling:

* `Unavailable`: something ragsync depends on cannot be used right now (a store, the deny set, a
  model, the reranker). Nothing was decided; the operation fails with one line saying what to do
  (CLI exit 1, API 503) or is retried, and is never turned into an answer, an abstention or a read
  with fewer filters.
* `InvalidInput`: one input is refused (a document, an event, an instant). That input's error,
  reported, never a stopped scan or worker; everything else goes on. They are ValueErrors, so
  pydantic reports one raised in a validator as invalid input.

    RagsyncError
    ├── Unavailable (RuntimeError)
    │   ├── StoreUnavailable          a store: unreachable, incompatible, locked
    │   │     ElasticUnavailable (indexer.elastic), QdrantUnavailable (indexer.qdrant_server),
    │   │     KafkaUnavailable (streams.kafka_producer): the adapters' own, beside them
    │   ├── SourceUnavailable         a document source (a wiki, a share) cannot be read: the pass
    │   │     fails, nothing is deleted; DokuWikiError (connectors.dokuwiki), SmbUnavailable
    │   │     (connectors.smb), the connectors' own, beside them
    │   ├── DenyUnavailable           the deny set could not be read or written
    │   ├── ModelUnavailable          an embedding or answering model gave nothing
    │   └── RerankerUnavailable       the cross-encoder export cannot be loaded
    ├── InvalidInput (ValueError)
    │   ├── InvalidInstant            a date or time that names no instant in UTC
    │   ├── Unreadable                a file of a supported type that cannot be read
    │   ├── BinaryContent             bytes that are no text in any encoding worth trusting
    │   ├── OverBudget                an input that cost more than its budget
    │   ├── Unchunkable               content that cannot be made into passages within bounds
    │   └── InvalidEvent              a log record that is not a valid event
    └── InvalidToken                  a session token that does not authenticate anyone

Each is also importable under its old name from the module that used to define it (indexer.ports,
indexer.deny, indexer.embedder, query.ports, ...). Errors that never leave their package stay
beside their code: ragsync's SettingsError, HomeOwned and CertificateError, the connectors'
SourceConflict and GitError, query's InvalidDecision, and the private ones that steer control flow.
"""

from __future__ import annotations

from typing import Literal

__all__ = [
    "BinaryContent",
    "DenyUnavailable",
    "InvalidEvent",
    "InvalidInput",
    "InvalidInstant",
    "InvalidToken",
    "ModelUnavailable",
    "OverBudget",
    "RagsyncError",
    "RerankerUnavailable",
    "SourceUnavailable",
    "StoreUnavailable",
    "Unavailable",
    "Unchunkable",
    "Unreadable",
]


class RagsyncError(Exception):
    """Every error ragsync raises on purpose."""


# ---- something ragsync depends on cannot be used now ----------------------------------------------


class Unavailable(RagsyncError, RuntimeError):
    """A dependency cannot be used right now: nothing was decided."""


class StoreUnavailable(Unavailable):
    """A store cannot be used at all (unreachable, incompatible, locked): the message is one line saying what to do."""


class SourceUnavailable(Unavailable):
    """A document source cannot be read now (unreachable, refused login): that source's pass fails in one
    line and deletes nothing, since an unread source says nothing about which documents are gone."""


class DenyUnavailable(Unavailable):
    """The deny set could not be read or written (e.g. a Redis outage)."""


class ModelUnavailable(Unavailable):
    """A model gave no result: the embedding model could not be loaded, or the answering model's API gave
    no decision. An infrastructure failure, not an answer or an abstention.

    The message carries the status, error type and request id for operators, never the API's
    free-text error message, which could echo prompt content (evidence) into logs.
    """

    def __init__(self, message: str, *, status_code: int | None = None, retryable: bool = True) -> None:
        super().__init__(message)
        self.status_code = status_code
        self.retryable = retryable


class RerankerUnavailable(Unavailable):
    """The configured cross-encoder export cannot be loaded."""


# ---- one input is refused; the others go on -------------------------------------------------------


class InvalidInput(RagsyncError, ValueError):
    """One input is refused, with the reason for its report: that input's error, never a stopped pass."""


class InvalidInstant(InvalidInput):
    """A date or time that cannot be read, or names no instant in UTC (see schemas.instants)."""


class Unreadable(InvalidInput):
    """The file is of a supported type but cannot be read (corrupt, encrypted, no text): not indexed."""


class BinaryContent(InvalidInput):
    """The bytes are not text in any encoding worth trusting."""


class OverBudget(InvalidInput):
    """The input cost more than its budget: not indexed, reported with `reason` and `detail`."""

    def __init__(self, detail: str, reason: Literal["over budget", "too large"] = "over budget") -> None:
        super().__init__(detail)
        self.detail = detail
        self.reason = reason


class Unchunkable(InvalidInput):
    """The document's content cannot be made into passages within bounds (nested too deeply, or its
    passages would repeat its headers to many times its size): that document's error, never a worker's."""


class InvalidEvent(InvalidInput):
    """A log record that does not decode to a valid event: dead-lettered, the others applied."""


# ---- who is asking --------------------------------------------------------------------------------


class InvalidToken(RagsyncError):
    """A token that does not establish who asks (its signature, claims or lifetime): the request is refused."""
