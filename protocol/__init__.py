"""fedldp protocol core: pure math and wire schema (numpy, scipy and pydantic only, no I/O)."""
