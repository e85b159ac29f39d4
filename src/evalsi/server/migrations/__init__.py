"""Alembic migrations of the server's database, applied on start (see ``evalsi.server._db.migrate``)."""
