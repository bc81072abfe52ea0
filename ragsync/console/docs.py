"""`/docs` without a CDN: FastAPI's Swagger UI page loads its script and style from jsDelivr, so on a
machine without internet it was a blank page. The app serves the assets itself under /docs/assets,
and the page references nothing else (no favicon from fastapi.tiangolo.com, no online validator badge).

The assets come from the `fastapi-offline` package (Swagger UI 5, which reads the OpenAPI 3.1 document
FastAPI writes; `swagger-ui-bundle` ships Swagger UI 3, which refuses it: "does not specify a valid
version field"). Only its static files are used, not its FastAPI subclass."""

from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.openapi.docs import get_swagger_ui_html
from starlette.requests import Request
from starlette.responses import HTMLResponse
from starlette.routing import Mount, Route
from starlette.staticfiles import StaticFiles

ASSETS = "/docs/assets"


def assets_dir() -> str:
    import fastapi_offline

    return str(Path(fastapi_offline.__file__).parent / "static")


def docs_page(openapi_url: str = "/openapi.json", title: str = "ragsync API") -> str:
    body = get_swagger_ui_html(
        openapi_url=openapi_url,
        title=title,
        swagger_js_url=f"{ASSETS}/swagger-ui-bundle.js",
        swagger_css_url=f"{ASSETS}/swagger-ui.css",
        swagger_favicon_url=f"{ASSETS}/favicon.png",
        swagger_ui_parameters={"validatorUrl": None},  # the default badge asks validator.swagger.io
    ).body
    return bytes(body).decode()


def mount_docs(app: FastAPI) -> None:
    """Replace FastAPI's CDN-backed /docs (and its OAuth redirect page) with the bundled assets."""
    page = docs_page(app.openapi_url or "/openapi.json", f"{app.title} API")

    async def docs(request: Request) -> HTMLResponse:
        return HTMLResponse(page)

    kept = [r for r in app.router.routes if getattr(r, "path", None) not in ("/docs", "/docs/oauth2-redirect")]
    app.router.routes[:] = [
        Route("/docs", docs, methods=["GET"], include_in_schema=False),
        Mount(ASSETS, StaticFiles(directory=assets_dir()), name="docs-assets"),
        *kept,
    ]
