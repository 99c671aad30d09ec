"""The web page at `/` (server.ui.enabled): static files shipped in the package (orthrus_rag/serving/web), no build
step, using only the server's public API (docs/web.md)."""
from __future__ import annotations

from pathlib import Path

from fastapi import FastAPI
from fastapi.responses import FileResponse, Response
from fastapi.staticfiles import StaticFiles

WEB = Path(__file__).resolve().parents[1] / "web"


async def page() -> FileResponse:
    return FileResponse(WEB / "index.html", headers={"Cache-Control": "no-cache"})


class RevalidatedFiles(StaticFiles):
    """Static files a browser checks (by ETag) before reusing, so a page and its modules always match."""

    def file_response(self, *args, **kwargs) -> Response:
        response = super().file_response(*args, **kwargs)
        response.headers["Cache-Control"] = "no-cache"
        return response


def install_web(app: FastAPI) -> None:
    app.add_api_route("/", page, include_in_schema=False)
    app.mount("/web", RevalidatedFiles(directory=WEB), name="web")
