"""Privacy mechanisms shared by the families: vectorised randomizers with their theory
(randomized response, Laplace, Duchi, …), transforms (Hadamard, Kashin) and the (ε, δ) noise
calibration of the central protocols."""
