"""The typed client of the fedldp REST API: what a script, a notebook or another client needs to
talk to a server (``client``: ``ApiClient``; ``connection``: its keep-alive connection pool;
``errors``: the exception tree of the server's error codes; ``retry``: the retry policy;
``sse``: the event-stream reader). It imports only ``fedldp.protocol``: nothing of the swarm."""
