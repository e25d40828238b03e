"""Heterogeneous ε: Aliakbarpour, Fallah, Roy, Stevens, "High-Probability Bounds For
Heterogeneous Local Differential Privacy", arXiv:2510.11895 (2025).

Spec: `docs/specs/heterogeneous-ldp.md`. Means and frequencies under one ε per user (Algs. 1–5):
the one-round flow they share (`flow`), the mean protocols (`means`, Algs. 1–4), the
frequency protocol (`frequency`, Alg. 5) and their weighted estimators (`estimators`)."""
