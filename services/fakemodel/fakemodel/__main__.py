"""``crosscheck-fakemodel``: serve the scripted model over HTTP."""

from __future__ import annotations

import uvicorn

from fakemodel.app import create_app
from fakemodel.settings import FakeModelSettings


def main() -> None:
    settings = FakeModelSettings()
    uvicorn.run(
        create_app(settings),
        host=settings.host,
        port=settings.port,
        log_level="warning",
        access_log=False,
    )


if __name__ == "__main__":
    main()
