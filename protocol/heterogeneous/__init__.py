"""Heterogeneous ε: Aliakbarpour, Fallah, Roy, Stevens, "High-Probability Bounds For
Heterogeneous Local Differential Privacy", arXiv:2510.11895 (2025).

Spec: `shared/specs/heterogeneous-ldp.md`. Means and frequencies under one ε per user (Algs. 1–5):
the protocols (`protocols`) and their weighted estimators (`estimators`)."""
