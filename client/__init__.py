"""fedldp client side: simulated users, populations, the in-process simulator, the swarm."""
