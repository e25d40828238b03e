"""Alembic revisions of the server's database schema (``fedldp.server.store.schema`` runs them).

``fedldp.server.store.tables`` is the source of truth; ``versions/NNNN_slug.py`` holds one revision
each, its revision id equal to the file stem (``0002_study_epsilon_range``), each one's
``down_revision`` the one before, in a single line. A test upgrades an empty database to the head
and fails when Alembic's autogenerate still finds a difference from the tables.

Adding a column or table: change ``tables.py``, then write the next revision, e.g. from the
repository root (``alembic.ini`` points here and at a scratch SQLite file)::

    alembic upgrade head
    alembic revision --autogenerate --rev-id 0003_slug -m "what changed"

and read what it wrote: ALTERs go in ``op.batch_alter_table`` (SQLite cannot alter most things in
place), and a new NOT NULL column on a table that has rows needs a server default or a backfill.
"""
