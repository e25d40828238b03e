"""Protocols that stay private over repeated collection by memoizing (docs/longitudinal.md):
RAPPOR (Erlingsson, Pihur, Korolova, CCS 2014) and Ding, Kulkarni, Yekhanin's 1BitMean and
dBitFlip (NeurIPS 2017), written only against ``fedldp.protocol.api``."""
