"""fedldp aggregation server: FastAPI routes → services → repository → SQLAlchemy tables."""
