"""The 30-day campaign figure of docs/campaigns.md (issue 29 item 5): each day's error and each
device's cumulative ε spend, fresh randomization against memoization, on one population.

One campaign template, run twice in process (``simulate_campaign``) with the same seed, so the
same devices hold the same values every day: ``memo-1bitmean`` (m = 1, s = 1, ε = 1 per device
and day) with ``memoize: true`` and with ``memoize: false``, over a Bernoulli law whose p drifts
from 0.30 by 0.01 a day (0.59 on day 29; a device holds 1[u < p_t] for its own uniform u, so its
value changes at most once). No budget: every device reports every day. Each device is charged
by the protocol's charge rules (docs/longitudinal.md §5): its own (ε per distinct memoized
value) and the server's (min(T, s + 1)·ε).

The claims, each checked here (the script exits with status 1 naming a failed one):

1. fresh: every device has spent exactly (t + 1)·ε after day t, on both sides;
2. memoized, the server's charge: exactly min(t + 1, 2)·ε for every device;
3. memoized, the device's own charge: exactly ε per distinct value it held, so 1 or 2 after
   day 29; the share of devices at 2 is P(0.30 ≤ u < 0.59) = 0.29 up to its binomial error
   (z = 3.29, two-sided 10⁻³, times √(0.29·0.71/n));
4. each day's error, memoized and fresh, lies within ± z·m(e^ε + 1)/(2(e^ε − 1)√n), the
   protocol's variance bound (P(1 − P) ≤ 1/4), with z the two-sided normal quantile at
   10⁻³/60 (Bonferroni over 2 × 30 days).

Writes the per-day numbers as CSV and draws two panels: the error per day with the band, and the
cumulative spend per device (fresh; memoized, the devices' mean, their range and the server's
charge).

    .venv/bin/python docs/figures/campaign_spend.py [--users N] [--seed S] [--figure PATH]
                                                   [--csv PATH]
"""

from __future__ import annotations

import argparse
import csv
import math
import sys
from pathlib import Path
from typing import Any

import matplotlib
import numpy as np
from scipy.stats import norm

from fedldp.client.campaign.simulate import occurrence_population, simulate_campaign
from fedldp.client.campaign.template import CampaignTemplate

matplotlib.use("Agg")
import matplotlib.pyplot as plt

HERE = Path(__file__).resolve().parent
DAYS = 30
EPSILON = 1.0
P0, SLOPE = 0.30, 0.01


def template(memoize: bool, users: int) -> CampaignTemplate:
    return CampaignTemplate.model_validate(
        {
            "protocol": "memo-1bitmean",
            "params": {"bound": 1.0, "levels": 1, "memoize": memoize},
            "population": {
                "users": users,
                "distribution": "bernoulli",
                "p": P0,
                "epsilon": EPSILON,
                "drift": {"mean_per_day": SLOPE},
            },
            "every": "1d",
            "times": DAYS,
        }
    )


def own_spend_by_day(t: CampaignTemplate, seed: int) -> np.ndarray[Any, Any]:
    """Each device's own memoized charge after each day (days × devices), recomputed from its
    values, independently of the ledger: ε per distinct value held so far (s = 1: the grid
    point is the value)."""
    pops = [occurrence_population(t, seed, k) for k in range(DAYS)]
    n = pops[0].n
    values = np.stack([np.asarray(p.data(np.arange(n)).values) for p in pops])  # (days, n)
    seen_zero = np.cumsum(values == 0, axis=0) > 0
    seen_one = np.cumsum(values == 1, axis=0) > 0
    return np.asarray(EPSILON * (seen_zero.astype(float) + seen_one.astype(float)))


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--users", type=int, default=5000)
    parser.add_argument("--seed", type=int, default=29)
    parser.add_argument("--figure", type=Path, default=HERE / "campaign-spend.png")
    parser.add_argument("--csv", type=Path, default=HERE / "campaign-spend.csv")
    args = parser.parse_args()
    n = args.users
    memo_t, fresh_t = template(True, n), template(False, n)
    memo = simulate_campaign(memo_t, args.seed)
    fresh = simulate_campaign(fresh_t, args.seed)
    own = own_spend_by_day(memo_t, args.seed)
    days = np.arange(DAYS, dtype=np.float64)
    truth = np.array([o.truth for o in memo.occurrences], dtype=np.float64)
    err_memo = np.array([o.estimate for o in memo.occurrences], dtype=np.float64) - truth
    err_fresh = np.array([o.estimate for o in fresh.occurrences], dtype=np.float64) - truth
    c = (math.exp(EPSILON) + 1) / (math.exp(EPSILON) - 1)
    sigma = c / (2 * math.sqrt(n))
    z = float(norm.ppf(1 - 1e-3 / (2 * 2 * DAYS)))
    band = z * sigma
    server = np.minimum(days + 1, 2) * EPSILON
    share = float(np.mean(own[-1] == 2 * EPSILON))
    expected_share = (P0 + SLOPE * (DAYS - 1)) - P0
    z_share = float(norm.ppf(1 - 1e-3 / 2))
    share_tol = z_share * math.sqrt(expected_share * (1 - expected_share) / n)

    claims = {
        "1 fresh spend is (t+1)·ε on both sides": bool(
            np.array_equal(fresh.spent, np.full(n, DAYS * EPSILON))
            and np.array_equal(fresh.bound, fresh.spent)
        ),
        "2 memoized server charge is min(t+1, 2)·ε": bool(
            np.array_equal(memo.bound, np.full(n, server[-1]))
        ),
        "3a memoized own charge is ε per distinct value": bool(np.array_equal(memo.spent, own[-1])),
        f"3b share of devices at 2ε = {share:.4f}, predicted {expected_share:.2f} ± "
        f"{share_tol:.4f}": abs(share - expected_share) <= share_tol,
        f"4 every day's error within ±{band:.4f} (z = {z:.2f})": bool(
            np.all(np.abs(err_memo) <= band) and np.all(np.abs(err_fresh) <= band)
        ),
    }
    for claim, ok in claims.items():
        print(("PASS " if ok else "FAIL ") + claim)
    print(
        f"max |error|: memoized {np.abs(err_memo).max():.4f}, fresh {np.abs(err_fresh).max():.4f}"
        f"; day-to-day correlation of the error: memoized "
        f"{np.corrcoef(err_memo[:-1], err_memo[1:])[0, 1]:.2f}, fresh "
        f"{np.corrcoef(err_fresh[:-1], err_fresh[1:])[0, 1]:.2f}"
    )

    with args.csv.open("w", newline="") as f:
        w = csv.writer(f)
        w.writerow(
            [
                "day",
                "truth",
                "error_memoized",
                "error_fresh",
                "band",
                "spend_fresh",
                "spend_memoized_mean",
                "spend_memoized_max",
                "spend_memoized_server",
            ]
        )
        for k in range(DAYS):
            w.writerow(
                [
                    k,
                    f"{truth[k]:.6g}",
                    f"{err_memo[k]:.6g}",
                    f"{err_fresh[k]:.6g}",
                    f"{band:.6g}",
                    f"{(k + 1) * EPSILON:g}",
                    f"{own[k].mean():.6g}",
                    f"{own[k].max():g}",
                    f"{server[k]:g}",
                ]
            )

    fig, (top, bottom) = plt.subplots(2, 1, figsize=(9, 8.5), sharex=True)
    top.axhspan(-band, band, color="#e5e7eb", label=f"predicted band (±{band:.3f})")
    top.axhline(0, color="#6b7280", linewidth=0.8)
    top.plot(days, err_fresh, "o-", color="#dc2626", label="fresh (memoize: false)")
    top.plot(days, err_memo, "s-", color="#2563eb", label="memoized (memoize: true)")
    top.set_ylabel("estimate − truth (mean)")
    top.set_title(
        f"memo-1bitmean, {n} devices, ε = {EPSILON:g} a day, Bernoulli p = 0.30 + 0.01·day\n"
        "each day's error"
    )
    top.legend(loc="upper left", fontsize=9, ncol=3)
    top.set_ylim(-1.5 * band, 1.7 * band)
    top.grid(alpha=0.3)

    bottom.plot(days, days + 1, "o-", color="#dc2626", label="fresh: every device (t + 1)·ε")
    bottom.plot(
        days, server, "--", color="#111827", label="memoized: server's charge min(t+1, 2)·ε"
    )
    bottom.fill_between(
        days,
        own.min(axis=1),
        own.max(axis=1),
        color="#93c5fd",
        alpha=0.5,
        label="memoized: devices' own charge, min to max",
    )
    bottom.plot(days, own.mean(axis=1), "s-", color="#2563eb", label="memoized: devices' mean")
    bottom.set_yscale("log")
    bottom.set_yticks([1, 2, 5, 10, 20, 30])
    bottom.set_yticklabels(["1", "2", "5", "10", "20", "30"])
    bottom.set_ylabel("cumulative ε spent per device (log)")
    bottom.set_xlabel("day of the campaign (one collection a day)")
    bottom.set_title("each device's cumulative spend")
    bottom.legend(loc="upper left", fontsize=9)
    bottom.grid(alpha=0.3, which="both")
    fig.tight_layout()
    fig.savefig(args.figure, dpi=110)
    print(f"wrote {args.figure} and {args.csv}")
    return 0 if all(claims.values()) else 1


if __name__ == "__main__":
    sys.exit(main())
