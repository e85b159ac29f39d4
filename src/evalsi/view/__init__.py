"""``evalsi view``: a local, read-only web viewer for runs, comparisons, learning curves and reward score files.

Example:
    >>> from evalsi.view import create_app
    >>> app = create_app(["results/"])  # a Starlette app: serve it with uvicorn, or mount it under /ui

The server can mount the same app: ``Mount("/ui", app=create_app(paths))``, or over sources of its own with a
:class:`Catalog` subclass (the evalsi server's reads its database) and a :class:`RunCache` shared by its viewers.

"""

from evalsi._util.public import publish
from evalsi.view._app import create_app
from evalsi.view._catalog import Catalog, Source, source_id
from evalsi.view._runs import Records, RunCache, RunData, headline, make_run

__all__ = ["Catalog", "Records", "RunCache", "RunData", "Source", "create_app", "headline", "make_run", "source_id"]

publish(__name__)
