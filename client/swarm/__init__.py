"""A simulated population against a server (docs/architecture.md, "Flow of a study"): ``run``
(``run_swarm``: create or join, enroll, drive, result), ``enrolling`` (leases and enrollment),
``agents`` (blocks of users on the batch endpoints) and ``peruser`` (one agent per user), with
what they share (``driving``), the simulated ``user``, the ``roster`` of enrolled users, the data
drawn ahead (``prefetch``), progress bars (``progress``) and a server child process
(``server_process``). It talks to the server through ``fedldp.client.api``."""
