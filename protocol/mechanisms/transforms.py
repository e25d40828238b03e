"""Linear-algebra primitives of user-level-ldp.md §2.4 (Sylvester–Hadamard) and §2.5 (Kashin).

**Sylvester–Hadamard** (§2.4, paper App. D.1 and B.3): ``H_1 = [1]``,
``H_{2k} = [[H_k, H_k], [H_k, −H_k]]``. With 0-based indices (the spec's 1-based k − 1, l − 1)
``H[k, l] = (−1)^popcount(k AND l)``, so ``H_k`` is the top-left block of ``H_{2k}`` and an entry
does not depend on the matrix size. H is symmetric, ``H H = k·I`` and row 0 is all ones.
Alg 2-H (§3.5) uses ``U = H_{d'}/√d'``; Alg 4/5 (§3.8–3.9) encode bins with its entries. ``fwht``
applies it in O(k log k) without building it.

**Kashin representation** (§2.5, paper Lemma 1 as corrected in §7 E1): the paper's linear map
``x ↦ Ux`` cannot satisfy ``‖Ux‖_∞ ≤ K‖x‖₂/√d`` for large d (some row of U has norm ≥ 1/√2, and
x along it gives ``‖Ux‖_∞·√d/‖x‖₂ ≥ √(d/2)``). We use the nonlinear Lyubarskii–Vershynin truncation
instead:

1. a public frame ``U`` (N×d, ``UᵀU = I_d``, N = 2d): Q of the reduced QR of a standard Gaussian
   matrix drawn from the public seed (columns signed so that diag(R) > 0, which makes Q a function
   of the Gaussian draw alone, whatever LAPACK computed it);
2. ``a(x)``: a ← 0, r ← x; up to 40 times, while ``‖r‖₂ > KASHIN_STOP·‖x‖₂``: c ← Ur,
   M ← ‖r‖₂/√(δN) with δ = ½, a ← a + clip(c, −M, M), r ← r − Uᵀclip(c, −M, M). Finally a ← a + Ur,
   so ``Uᵀa(x) = x`` up to rounding, whether or not r converged;
3. K = 2.5 is the *assumed* constant that sets noise scales (§3.4: ``D' = K·D/√d``); privacy never
   depends on it, because Alg 1 clips;
4. calibration at setup (§2.5 step 4): the observed ``max ‖a(x)‖_∞·√d/‖x‖₂`` over 1000 random unit
   vectors, every frame row and every basis vector (their negatives too: a(−x) = −a(x) exactly, so
   they need no separate run). A frame whose observed constant exceeds K, or whose residual after
   the 40 steps exceeds ``RESIDUAL_TOL``·‖x‖₂, is redrawn; after ``FRAME_ATTEMPTS`` draws N = 4d is
   tried, then ``ValueError``.

``a`` is odd and positively homogeneous (``a(cx) = c·a(x)`` for c > 0, §2.5 step 6: the heavy-tail
variant §3.6 relies on it), applied per sample and averaged per user (step 5): θ = E[a(X)] has
``Uᵀθ = μ`` and the server decodes ``μ̂ = Uᵀθ̂`` (§3.4 step 3).

Cost: ``coefficients`` on n vectors is two (n×d)·(d×N) products per step, 4·n·d² multiply-adds
for N = 2d, and at most 40 steps (fewer only when every residual reaches 1e−12 first: d ≲ 8). About
0.4 s for 10^5 vectors of d = 16 on one core. ``kashin_frame`` runs it on 1000 + N + d calibration
vectors after an O(N·d²) QR: 0.45 s at d = 256 on 2 idle cores (0.75 s on one), times the number of
draws (a redraw happens for roughly 5–10% of seeds at d ≥ 16). Under CPU contention a threaded BLAS
makes these small products several times slower; one BLAS thread per process avoids that.
"""

from __future__ import annotations

import math
import operator
from dataclasses import dataclass

import numpy as np
from numpy.typing import ArrayLike

from fedldp.protocol.core.base.records import FloatArray, IntArray

__all__ = [
    "CALIBRATION_SAMPLES",
    "FRAME_ATTEMPTS",
    "KASHIN_DELTA",
    "KASHIN_K",
    "KASHIN_STEPS",
    "KASHIN_STOP",
    "RESIDUAL_TOL",
    "KashinFrame",
    "fwht",
    "hadamard",
    "hadamard_entries",
    "kashin_frame",
    "kashin_ratio_prediction",
    "next_power_of_two",
]

KASHIN_K = 2.5
"""The assumed Kashin constant (§2.5 step 3): coefficients are bounded by ``K·‖x‖₂/√d``."""

KASHIN_DELTA = 0.5
"""Truncation level parameter δ of §2.5 step 2: M = ‖r‖₂/√(δN), i.e. ‖r‖₂/√d when N = 2d."""

KASHIN_STEPS = 40
"""Maximal number of truncation steps per vector (§2.5 step 2)."""

KASHIN_STOP = 1e-6
"""A vector stops once its residual is at most this fraction of its norm (§2.5 step 2 says
1e-12; [DEVIATION] 1e-6 halves the cost for d >= 16, where 1e-12 is never reached within the 40
steps. Nothing is lost: the final ``a += Ur`` keeps ``Uᵀa = x`` exact, and it moves any
coefficient by at most ‖r‖₂ <= 1e-6·‖x‖₂, negligible next to the bound K·‖x‖₂/√d)."""

RESIDUAL_TOL = 1e-6
"""[PROPOSAL] Calibration deems the residual converged when every calibration vector ends the 40
steps with ``‖r‖₂ ≤ RESIDUAL_TOL·‖x‖₂`` (a contraction of at most ~0.7 per step). Typical frames
reach 1e-9 (d ≥ 16) or 1e-12 (d ≤ 8)."""

CALIBRATION_SAMPLES = 1000
"""Random unit vectors in the calibration set (§2.5 step 4), besides the frame rows and atoms."""

FRAME_ATTEMPTS = 4
"""Frames drawn with N = 2d before falling back to N = 4d (as many again)."""

_FRAME_KEY = 0x4B  # "K": spawn key of the public frame stream, (0x4B, d, attempt)
# ``coefficients`` works on blocks of about this many coefficients (rows ≈ this / N), so that its
# temporaries stay in cache and memory stays flat for 10^6 samples.
_BLOCK_ELEMENTS = 1 << 17


def _check_int(value: int, name: str, minimum: int) -> int:
    if isinstance(value, bool):
        raise TypeError(f"{name} must be an integer, got {value!r}")
    try:
        v = operator.index(value)
    except TypeError:
        raise TypeError(f"{name} must be an integer, got {value!r}") from None
    if v < minimum:
        raise ValueError(f"{name} must be >= {minimum}, got {v}")
    return v


def _is_power_of_two(k: int) -> bool:
    return k >= 1 and k & (k - 1) == 0


def next_power_of_two(d: int) -> int:
    """The smallest power of 2 that is >= d (d >= 1): the padded size d' of §3.5."""
    d = _check_int(d, "d", 1)
    return 1 << (d - 1).bit_length()


def hadamard_entries(rows: IntArray, cols: IntArray) -> FloatArray:
    """Entries ``H[rows, cols] = (−1)^popcount(rows AND cols)`` (0-based, broadcast), as ±1.0.

    Valid for every Sylvester–Hadamard matrix larger than the indices, without building one.
    """
    r = np.asarray(rows)
    c = np.asarray(cols)
    for name, idx in (("rows", r), ("cols", c)):
        if not np.issubdtype(idx.dtype, np.integer):
            raise TypeError(f"Hadamard {name} must be integers, got dtype {idx.dtype}")
        if idx.size and np.min(idx) < 0:
            raise ValueError(f"Hadamard {name} must be >= 0 (0-based indices)")
    parity = np.bitwise_count(np.bitwise_and(r, c)) & 1
    return np.asarray(1.0 - 2.0 * parity, dtype=np.float64)


def hadamard(k: int) -> FloatArray:
    """The k×k Sylvester–Hadamard matrix (k a power of 2): symmetric, ``H H = k·I`` (§2.4)."""
    k = _check_int(k, "k", 1)
    if not _is_power_of_two(k):
        raise ValueError(
            f"Hadamard size must be a power of 2, got {k}; pad to {next_power_of_two(k)}"
        )
    idx = np.arange(k, dtype=np.int64)
    return hadamard_entries(idx[:, None], idx[None, :])


def fwht(x: ArrayLike, axis: int = -1) -> FloatArray:
    """Unnormalised fast Walsh–Hadamard transform along ``axis``: ``x @ hadamard(k)`` there.

    The axis length k must be a power of 2. O(k log k) per vector: one butterfly pass per bit.
    Returns a new array; ``fwht(fwht(x)) = k·x``.
    """
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0:
        raise ValueError("fwht needs at least one axis")
    moved = np.moveaxis(arr, axis, -1)  # AxisError (a ValueError) on a bad axis
    k = moved.shape[-1]
    if not _is_power_of_two(k):
        pad = next_power_of_two(max(k, 1))
        raise ValueError(f"fwht axis length must be a power of 2, got {k}; zero-pad to {pad}")
    y = np.array(moved, dtype=np.float64, order="C", copy=True)
    flat = y.reshape(-1, k)
    h = 1
    while h < k:
        v = flat.reshape(flat.shape[0], k // (2 * h), 2, h)
        low = v[:, :, 0, :].copy()
        v[:, :, 0, :] += v[:, :, 1, :]
        np.subtract(low, v[:, :, 1, :], out=v[:, :, 1, :])
        h *= 2
    return np.moveaxis(y, -1, axis)


def _truncation(u: FloatArray, x: FloatArray) -> tuple[FloatArray, FloatArray]:
    """§2.5 step 2 on the rows of x (n×d): the coefficients (n×N) and the relative residuals
    ``‖r‖₂/‖x‖₂`` before the final ``a += Ur`` (0 for zero rows)."""
    n_coef = u.shape[0]
    ut = u.T
    # Scale each vector by a power of 2 near its largest entry: exact (so a(2^j·x) = 2^j·a(x) to
    # the bit), and no squared norm overflows or underflows whatever the magnitude of x.
    _, exponent = np.frexp(np.max(np.abs(x), axis=1))
    x = np.ldexp(x, -exponent[:, None])
    norms = np.sqrt(np.einsum("ij,ij->i", x, x))
    stop = KASHIN_STOP * norms
    level = 1.0 / math.sqrt(KASHIN_DELTA * n_coef)
    a = np.zeros((x.shape[0], n_coef), dtype=np.float64)
    r = x.copy()
    for _ in range(KASHIN_STEPS):
        rn = np.sqrt(np.einsum("ij,ij->i", r, r))
        live = rn > stop
        if not np.any(live):
            break
        # M = 0 freezes a finished vector: its clipped coefficients are ±0, so a and r stay put.
        m = np.where(live, rn * level, 0.0)[:, None]
        c = r @ ut
        np.minimum(c, m, out=c)  # clip(c, −M, M): two passes beat np.clip's broadcast bounds
        np.maximum(c, -m, out=c)
        a += c
        r -= c @ u
    rn = np.sqrt(np.einsum("ij,ij->i", r, r))
    a += r @ ut
    safe = np.where(norms > 0, norms, 1.0)
    return np.ldexp(a, exponent[:, None]), rn / safe


def _check_vectors(x: ArrayLike, width: int, what: str) -> FloatArray:
    arr = np.asarray(x, dtype=np.float64)
    if arr.ndim == 0 or arr.shape[-1] != width:
        raise ValueError(f"expected {what} of shape (..., {width}), got shape {arr.shape}")
    if not np.all(np.isfinite(arr)):
        raise ValueError(f"{what} must be finite")
    return arr


@dataclass(frozen=True, eq=False)
class KashinFrame:
    """A public Kashin frame (§2.5): ``u`` is N×d with ``UᵀU = I_d``.

    ``k_const`` is the assumed constant K that sets noise scales (``bound``); ``observed`` is the
    calibrated ``max ‖a(x)‖_∞·√d/‖x‖₂`` (≤ ``k_const`` for frames from ``kashin_frame``). ``u`` is
    stored read-only. Compared by identity (it holds an array); compare ``u`` to compare frames.
    """

    u: FloatArray
    k_const: float = KASHIN_K
    observed: float = math.nan

    def __post_init__(self) -> None:
        u = np.array(self.u, dtype=np.float64, order="C", copy=True)
        if u.ndim != 2 or u.shape[1] < 1 or u.shape[0] < u.shape[1]:
            raise ValueError(f"a Kashin frame is N×d with N >= d >= 1, got shape {u.shape}")
        if not np.all(np.isfinite(u)):
            raise ValueError("a Kashin frame must be finite")
        gram_error = float(np.max(np.abs(u.T @ u - np.eye(u.shape[1]))))
        if gram_error > 1e-10:
            raise ValueError(f"a Kashin frame needs UᵀU = I (max deviation {gram_error:.2e})")
        if not (math.isfinite(self.k_const) and self.k_const > 0):
            raise ValueError(f"k_const must be finite and > 0, got {self.k_const!r}")
        if not (math.isnan(self.observed) or (math.isfinite(self.observed) and self.observed >= 0)):
            raise ValueError(f"observed must be finite and >= 0 (or NaN), got {self.observed!r}")
        u.setflags(write=False)
        object.__setattr__(self, "u", u)
        object.__setattr__(self, "k_const", float(self.k_const))
        object.__setattr__(self, "observed", float(self.observed))

    @property
    def d(self) -> int:
        """Dimension of the vectors."""
        return int(self.u.shape[1])

    @property
    def n_coef(self) -> int:
        """Number N of coefficients (2d, or 4d for a fallback frame)."""
        return int(self.u.shape[0])

    def coefficients(self, x: ArrayLike) -> FloatArray:
        """Kashin coefficients a(x) (§2.5 step 2) of vectors of shape (..., d): shape (..., N).

        Each vector is treated on its own (its own truncation levels and stopping time); zero
        vectors map to zero. ``Uᵀa(x) = x`` up to rounding and ``‖a(x)‖_∞ ≤ observed·‖x‖₂/√d`` on
        the calibration set (and, by the calibration's margin, ≤ ``k_const``·‖x‖₂/√d in practice).
        """
        arr = _check_vectors(x, self.d, "vectors")
        lead = arr.shape[:-1]
        flat = arr.reshape(-1, self.d)
        out = np.empty((flat.shape[0], self.n_coef), dtype=np.float64)
        block = max(1, _BLOCK_ELEMENTS // self.n_coef)
        for start in range(0, flat.shape[0], block):
            stop = start + block
            out[start:stop] = _truncation(self.u, flat[start:stop])[0]
        return out.reshape(*lead, self.n_coef)

    def decode(self, theta: ArrayLike) -> FloatArray:
        """``Uᵀθ`` for θ of shape (..., N): shape (..., d) (§3.4 step 3; ‖Uᵀ‖_op = 1)."""
        arr = _check_vectors(theta, self.n_coef, "coefficients")
        return np.asarray(arr @ self.u, dtype=np.float64)

    def bound(self, radius: float) -> float:
        """``D' = K·radius/√d``: the ℓ∞ bound of a(x) for ‖x‖₂ ≤ radius (§3.4)."""
        if not (math.isfinite(radius) and radius >= 0):
            raise ValueError(f"radius must be finite and >= 0, got {radius!r}")
        return self.k_const * radius / math.sqrt(self.d)


def _draw_frame(d: int, n_coef: int, seed: int, attempt: int) -> FloatArray:
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_FRAME_KEY, d, attempt)))
    q, r = np.linalg.qr(rng.standard_normal((n_coef, d)), mode="reduced")
    signs = np.where(np.diagonal(r) < 0, -1.0, 1.0)
    return np.asarray(q * signs, dtype=np.float64)


def _calibration_set(u: FloatArray, seed: int, attempt: int) -> FloatArray:
    """Frame rows and atoms first (the worst inputs in practice), then random unit vectors."""
    d = u.shape[1]
    rng = np.random.default_rng(np.random.SeedSequence(seed, spawn_key=(_FRAME_KEY, d, attempt, 0)))
    g = rng.standard_normal((CALIBRATION_SAMPLES, d))
    g /= np.sqrt(np.einsum("ij,ij->i", g, g))[:, None]
    return np.concatenate((u, np.eye(d), g))


def _calibrate(u: FloatArray, seed: int, attempt: int, limit: float) -> tuple[float, float]:
    """(observed constant, worst relative residual); stops early once the constant tops limit."""
    n_coef, d = u.shape
    xs = _calibration_set(u, seed, attempt)
    observed, residual = 0.0, 0.0
    for part in (xs[: n_coef + d], xs[n_coef + d :]):
        a, res = _truncation(u, part)
        ratio = (
            np.max(np.abs(a), axis=1) * math.sqrt(d) / np.sqrt(np.einsum("ij,ij->i", part, part))
        )
        observed = max(observed, float(np.max(ratio)))
        residual = max(residual, float(np.max(res)))
        if observed > limit:
            break
    return observed, residual


def kashin_frame(d: int, seed: int, k_const: float = KASHIN_K) -> KashinFrame:
    """The public Kashin frame for dimension d from a public seed (§2.5 steps 1 and 4).

    Attempt t draws ``U`` from ``default_rng(SeedSequence(seed, spawn_key=(0x4B, d, t)))`` and
    calibrates it on vectors from the child stream ``spawn_key=(0x4B, d, t, 0)``. Attempts
    0..FRAME_ATTEMPTS−1 use N = 2d, the next FRAME_ATTEMPTS use N = 4d; the first frame whose
    observed constant is ≤ k_const and whose residuals converged is returned. Deterministic in
    (d, seed, k_const). Raises ValueError when no attempt qualifies (with the smallest constant
    seen).
    """
    d = _check_int(d, "d", 1)
    seed = _check_int(seed, "seed", 0)
    if not (math.isfinite(k_const) and k_const > 0):
        raise ValueError(f"k_const must be finite and > 0, got {k_const!r}")
    best = math.inf
    attempt = 0
    for multiple in (2, 4):
        for _ in range(FRAME_ATTEMPTS):
            u = _draw_frame(d, multiple * d, seed, attempt)
            observed, residual = _calibrate(u, seed, attempt, k_const)
            if observed <= k_const and residual <= RESIDUAL_TOL:
                return KashinFrame(u=u, k_const=k_const, observed=observed)
            if residual <= RESIDUAL_TOL:
                best = min(best, observed)
            attempt += 1
    # A draw's calibration may stop early (above k_const), so ``best`` is a lower bound per draw.
    hint = f"every draw observed at least {best:.3f}" if math.isfinite(best) else "none converged"
    raise ValueError(
        f"no Kashin frame for d={d}, seed={seed} reached k_const={k_const} in {attempt} draws "
        f"(N = 2d and 4d): {hint}; raise k_const or try another seed"
    )


def kashin_ratio_prediction(d: int, k_const: float = KASHIN_K) -> float:
    """Predicted MSE ratio Alg 2-K / Alg 2 (ℓ∞), high regime, privacy-dominated: 2K²/d (§5.3).

    Kashin wins (ratio < 1) only for d > 2K², about 12 for K = 2.5 (E5 oracle, §6.2).
    """
    d = _check_int(d, "d", 1)
    if not (math.isfinite(k_const) and k_const > 0):
        raise ValueError(f"k_const must be finite and > 0, got {k_const!r}")
    return 2.0 * k_const * k_const / d
