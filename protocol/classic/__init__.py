"""The classic single-report baselines every LDP paper compares against, written only against the
public extension API (`fedldp.protocol.api`, docs/extending.md).

Frequency oracles over k items (one report per user, each user at its own ε):
- k-ary (generalized) randomized response, symmetric and optimized unary encoding, binary and
  optimized local hashing: Wang, Blocki, Li, Jha, "Locally Differentially Private Protocols for
  Frequency Estimation", USENIX Security 2017;
- Hadamard response: Acharya, Sun, Zhang, "Hadamard Response: Estimating Distributions Privately,
  Efficiently, and with Little Communication", AISTATS 2019;
- subset selection: Ye and Barg, "Optimal Schemes for Discrete Distribution Estimation Under Locally
  Differential Privacy", IEEE Trans. Inf. Theory 2018; Wang, Wu, Li, Jha, "Mutual Information
  Optimally Local Private Discrete Distribution Estimation", 2016.

Means on [−1, 1]:
- Duchi's mechanism: Duchi, Jordan, Wainwright, "Minimax Optimal Procedures for Locally Private
  Estimation", JASA 2018;
- the Piecewise and the Hybrid mechanism: Wang, Xiao, Yang, Zhao, Hui, Shin, Shin, Yu, "Collecting
  and Analyzing Multidimensional Data with Local Differential Privacy", ICDE 2019;
- the Laplace mechanism (Dwork, McSherry, Nissim, Smith 2006) as the textbook reference.
"""
