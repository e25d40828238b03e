"""The `fedldp` command line: `main` (the parser and the in-process commands), `remote` (server,
swarm, run), `studies` (the study commands against a server), `output` (tables and JSON), `params`
(shared flag parsing)."""
