"""The HTTP side of the client: the typed API client (`api`), simulated users and agents that
privatize and post (`user`, `agents`), the swarm that runs a population against a server
(`swarm`), a server child process (`server_process`) and progress display (`progress`)."""
