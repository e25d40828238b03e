"""User-level LDP: Zhao, Shen, Fan, Li, Wu, Wu, Liu, "Learning with User-Level Local Differential
Privacy", arXiv:2405.17079 (2024).

Spec: `docs/specs/user-level-ldp.md`. The two-stage mean (Alg. 1, `two_stage`, `means`) and the
§3.10 baselines (`baselines`), pooled over unequal ε's by `weighting`; the multi-dimensional
engine of Alg. 2 (its plan-time layout in `layout`, its client and server steps in `components`),
the driver its protocols share (`driver`) and its means (`multi_d`); learning by gradient rounds
(Alg. 3, `sgd`) and binned classification and regression (Algs. 4–5, `binned`)."""
