"""An application of a user's own with the dashboard mounted under `/queue`, as the README
shows it: served by uvicorn for the browser test (`QUEUECORE_DSN` names the database)."""

from __future__ import annotations

import os

from fastapi import FastAPI

from queuecore.dashboard import create_app

app = FastAPI()


@app.get("/")
def home() -> dict[str, str]:
    return {"app": "the user's own"}


app.mount("/queue", create_app(os.environ["QUEUECORE_DSN"]))
