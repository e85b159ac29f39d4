"""``evalsi view``: a local, read-only web viewer for runs, comparisons, learning curves and reward score files.

Example:
    >>> from evalsi.view import create_app
    >>> app = create_app(["results/"])  # a Starlette app: serve it with uvicorn, or mount it under /ui

The server can mount the same app: ``Mount("/ui", app=create_app(paths))``.

"""

from evalsi.view._app import create_app
from evalsi.view._catalog import Catalog, Source

__all__ = ["Catalog", "Source", "create_app"]
