"""The results store: an index of results trees in SQLite (default) or PostgreSQL, rebuilt by ingesting trees.

schema.py (the tables), db.py (URL, connect, migrate), ingest.py (tree → rows), select.py (rows → the cell tables
every reader already takes), history.py (one configuration over time), migrations/ (Alembic).
"""
