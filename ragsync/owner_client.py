"""How a command talks to the running owner of its home (`ragsync serve`) instead of opening the stores."""

from __future__ import annotations

from datetime import datetime
from typing import Any

import httpx

from ragsync.home_lock import OwnerInfo
from ragsync.operator_key import OperatorKeys
from ragsync.owner_api import OPERATOR_HEADER

TIMEOUT_S = 60.0
"""Generous: a serve that just started may still be loading its model when the first ask arrives."""


VERIFY_TIMEOUT_S = 900.0
"""`verify` reads every passage of every store: a large home takes minutes, not seconds."""


class OwnerUnreachable(RuntimeError):
    pass


class OwnerRefused(RuntimeError):
    def __init__(self, status_code: int, message: str) -> None:
        super().__init__(message)
        self.status_code = status_code


class OwnerClient:
    """`keys` is the home's operator key (ragsync.operator_key): read for each call, made when missing
    or expired, so a client outlives a rotation or an expiry."""

    def __init__(self, owner: OwnerInfo, keys: OperatorKeys) -> None:
        if not owner.api:
            raise ValueError("the owner serves no API")
        self.owner = owner
        self._keys = keys
        self._http = httpx.Client(base_url=owner.api, timeout=TIMEOUT_S)

    def _operator(self) -> dict[str, str]:
        return {OPERATOR_HEADER: self._keys.current()}

    def _call(self, method: str, path: str, **options: Any) -> Any:
        try:
            response = self._http.request(method, path, **options)
            if (
                response.status_code == 401
                and OPERATOR_HEADER in options.get("headers", {})
                and OPERATOR_HEADER in response.text
            ):
                # The key expired or was rotated between reading it and serve checking it: once more.
                response = self._http.request(method, path, **{**options, "headers": self._operator()})
        except httpx.HTTPError as exc:
            raise OwnerUnreachable(f"cannot reach {self.owner.describe()}: {exc}") from exc
        if response.status_code >= 400:
            try:
                message = str(response.json().get("error", response.text))
            except ValueError:
                message = response.text
            raise OwnerRefused(response.status_code, message)
        return response.json()

    def ask(self, token: str, question: str, as_of: datetime | None, *, trace: bool = False) -> dict[str, Any]:
        """The public answer (what a backend gets from POST /v1/ask); with `trace`, the operator route."""
        body: dict[str, Any] = {"question": question}
        if as_of is not None:
            body["as_of"] = as_of.isoformat()
        if trace:
            result: dict[str, Any] = self._call(
                "POST", "/v1/owner/ask", json={**body, "token": token}, headers=self._operator()
            )
            return result
        answer: dict[str, Any] = self._call("POST", "/v1/ask", json=body, headers={"Authorization": f"Bearer {token}"})
        return answer

    def status(self) -> dict[str, Any]:
        result: dict[str, Any] = self._call("GET", "/v1/owner/status", headers=self._operator())
        return result

    def deletion_certificate(self, doc_id: str, tenant: str | None) -> dict[str, Any]:
        """`ragsync audit deletion` through the owner, which holds the stores."""
        cert: dict[str, Any] = self._call(
            "POST",
            "/v1/owner/audit/deletion",
            json={"doc_id": doc_id, "tenant": tenant},
            headers=self._operator(),
        )
        return cert

    def verify(self, tenant: str | None) -> dict[str, Any]:
        """`ragsync verify` through the owner, which holds the stores (its report as a dict)."""
        report: dict[str, Any] = self._call(
            "POST",
            "/v1/owner/verify",
            json={"tenant": tenant},
            headers=self._operator(),
            timeout=VERIFY_TIMEOUT_S,
        )
        return report

    def close(self) -> None:
        self._http.close()
