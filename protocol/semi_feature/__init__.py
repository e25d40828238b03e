"""Semi-feature LDP: Ma, Jia, Yang, "Locally Private Estimation with Public Features".

Spec: `docs/specs/public-features-ldp.md`. Public features travel in clear and private ones and
the label are privatized: HistOfTree (`histoftree`, its two rounds in `histoftree_base`) on the
partitions and trees of `partition` and `trees`, the shared pieces in `common`, and the paper's
baselines (`hist_ldp`, `tree_baselines`)."""
