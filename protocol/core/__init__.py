"""The shared core every protocol family builds on: the `Protocol` abstraction (plans, rounds,
aggregation), seeded streams, the wire schema shared by server and client, and the ε ledger.

Families import only this package and `fedldp.protocol.mechanisms`."""
