"""What a server process holds while it runs: the ``Context`` (settings, database, caches of
plans, tokens and received reports, metrics, the central-trust keys), the study states the
services read, and the participants' credentials. Imports: ``store`` only."""
