"""Central user-level DP: Zhao, Lai, Shen, Li, Wu, Liu, "A Huber Loss Minimization Approach to Mean
Estimation under User-level Differential Privacy", NeurIPS 2024.

Spec: `docs/specs/huber-user-level-dp.md`. A trusted server releases (ε, δ)-DP means from each
user's local mean: the winsorized mean (`wme`), Huber-loss minimization (`huber`, with the
Hamming distance Δ̃ of its smooth sensitivity in `distance`) and the catalogue
protocols that run them (`protocols`), on the one-round release flow they share (`release`)."""
