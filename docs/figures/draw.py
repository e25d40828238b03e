"""Draw the concept diagrams of docs/concepts.md as SVG files beside this script (no JavaScript
renderer, so the site shows them offline): a study's life (study-life.svg) and the two trust
models (trust-model.svg). Run it after changing a diagram:

    .venv/bin/python docs/figures/draw.py

The phases and transitions drawn are those of docs/architecture.md, *Flow of a study*, and of
``fedldp.protocol.core.wire.studies.StudyPhase``; the trust models those of the catalogue's
``trust`` field (local, central)."""

from __future__ import annotations

from pathlib import Path

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.patches import FancyArrowPatch, FancyBboxPatch

HERE = Path(__file__).resolve().parent
INK = "#1f2937"
PHASE = "#e0e7ff"  # the study's phases
STEP = "#f3f4f6"  # what happens inside a phase
END_OK = "#dcfce7"
END_BAD = "#fee2e2"
CLIENT = "#fef3c7"
SERVER = "#dbeafe"


def box(
    ax: Axes, x: float, y: float, w: float, h: float, text: str, face: str, **kw: float
) -> None:
    """A rounded box centred at (x, y) with centred text."""
    ax.add_patch(
        FancyBboxPatch(
            (x - w / 2, y - h / 2),
            w,
            h,
            boxstyle="round,pad=0.02,rounding_size=0.08",
            facecolor=face,
            edgecolor=INK,
            linewidth=1.2,
        )
    )
    ax.text(x, y, text, ha="center", va="center", color=INK, fontsize=kw.get("size", 12.6))


def arrow(
    ax: Axes,
    start: tuple[float, float],
    end: tuple[float, float],
    label: str = "",
    *,
    bend: float = 0.0,
    where: tuple[float, float] | None = None,
    dashed: bool = False,
) -> None:
    """An arrow from start to end, its label at ``where`` (default: the midpoint)."""
    ax.add_patch(
        FancyArrowPatch(
            start,
            end,
            arrowstyle="-|>",
            mutation_scale=14,
            color=INK,
            linewidth=1.2,
            linestyle="--" if dashed else "-",
            connectionstyle=f"arc3,rad={bend}",
        )
    )
    if label:
        x, y = where or ((start[0] + end[0]) / 2, (start[1] + end[1]) / 2)
        ax.text(
            x,
            y,
            label,
            ha="center",
            va="center",
            fontsize=10.8,
            color=INK,
            bbox={"facecolor": "white", "edgecolor": "none", "pad": 1.5},
        )


def canvas(width: float, height: float) -> tuple[Figure, Axes]:
    fig, ax = plt.subplots(figsize=(width, height))
    ax.set_xlim(0, width)
    ax.set_ylim(0, height)
    ax.axis("off")
    return fig, ax


def study_life() -> Figure:
    """The phases of a study and what moves it from one to the next."""
    fig, ax = canvas(12.0, 6.4)
    ax.set_ylim(-0.3, 6.4)
    ax.text(0.2, 6.1, "A study's life", fontsize=16.8, weight="bold", color=INK, va="center")
    # the phases, left to right
    box(
        ax, 1.3, 3.6, 1.9, 0.8, "POST /v1/studies\nprotocol, params,\nseed, policy", STEP, size=10.8
    )
    box(ax, 4.0, 3.6, 2.0, 0.9, "enrolling", PHASE, size=14.4)
    box(ax, 7.4, 3.6, 2.0, 0.9, "running", PHASE, size=14.4)
    box(ax, 10.75, 5.0, 2.1, 0.9, "finished\nresult, error bar,\nε spent", END_OK, size=10.8)
    box(
        ax,
        10.75,
        3.6,
        2.1,
        0.9,
        "failed: quorum\nmissed or protocol\nerror (the reason)",
        END_BAD,
        size=10.8,
    )
    box(
        ax,
        10.75,
        2.2,
        2.1,
        0.9,
        "cancelled (admin\nkey), from enrolling\nor running",
        END_BAD,
        size=10.8,
    )
    arrow(ax, (2.25, 3.6), (3.0, 3.6), "create", where=(2.62, 3.95))
    arrow(ax, (5.0, 3.6), (6.4, 3.6), "start", where=(5.7, 3.95))
    ax.text(
        5.7,
        3.05,
        "target reached,\ndeadline or\nexplicit start:\nplan fixed from the\nε's and the seed",
        ha="center",
        va="top",
        fontsize=10.2,
        color=INK,
    )
    arrow(ax, (8.4, 3.85), (9.7, 4.85), "last round\ncloses", where=(8.85, 4.6))
    arrow(ax, (8.4, 3.6), (9.7, 3.6))
    arrow(ax, (8.4, 3.3), (9.7, 2.35))
    # enrollment detail
    box(
        ax,
        4.0,
        5.3,
        3.2,
        0.9,
        "participants enroll with their ε\n(open: anyone; leased: holders"
        "\nof a lease of participant ids)",
        STEP,
        size=10.2,
    )
    arrow(ax, (4.0, 4.85), (4.0, 4.05))
    arrow(ax, (3.3, 4.05), (3.3, 4.85), dashed=True)
    ax.text(
        1.55,
        4.75,
        "start refused\n(plan_infeasible):\nstays enrolling",
        ha="center",
        fontsize=9.6,
        color=INK,
    )
    # the round loop
    y = 1.0
    box(
        ax,
        5.0,
        y,
        2.1,
        0.8,
        "round k opens:\ncohort, broadcast,\nquorum, deadline",
        STEP,
        size=10.2,
    )
    box(ax, 7.4, y, 2.1, 0.8, "each member:\ntask → privatize\n→ report", STEP, size=10.2)
    box(ax, 9.8, y, 2.1, 0.8, "round closes:\naggregate →\npublic output", STEP, size=10.2)
    arrow(ax, (6.05, y), (6.35, y))
    arrow(ax, (8.45, y), (8.75, y))
    arrow(ax, (9.8, y - 0.42), (5.0, y - 0.42), bend=-0.15)
    ax.text(
        7.4,
        0.0,
        "the next round's broadcast comes from the outputs so far",
        ha="center",
        va="center",
        fontsize=10.2,
        color=INK,
    )
    arrow(ax, (7.4, 3.15), (7.4, 1.42), dashed=True)
    ax.text(
        7.55, 2.3, "every round,\none at a time", ha="left", va="center", fontsize=10.2, color=INK
    )
    return fig


def trust_model() -> Figure:
    """What leaves a user and what the server sees, under local and under central trust."""
    fig, ax = canvas(12.0, 6.0)
    ax.text(0.2, 5.75, "Trust models", fontsize=16.8, weight="bold", color=INK, va="center")
    for y, title in (
        (4.55, "local trust: every protocol but central-*"),
        (1.85, "central trust: central-wme, central-huber (and -vector)"),
    ):
        ax.text(0.2, y + 0.55, title, fontsize=13.2, weight="bold", color=INK, va="center")
    # local
    y = 3.95
    box(ax, 1.5, y, 2.4, 1.0, "user's device\nlocal samples x₁…xₘ\n(never sent)", CLIENT, size=10.8)
    box(
        ax,
        4.6,
        y,
        2.4,
        1.0,
        "privatize with its\nown εᵢ and stream;\nledger: refuses to\noverspend",
        CLIENT,
        size=10.2,
    )
    box(
        ax,
        8.05,
        y,
        2.9,
        1.0,
        "server: checks, aggregates;\nsees only privatized"
        "\nreports, refuses a\nreport past the ledger",
        SERVER,
        size=10.2,
    )
    box(ax, 10.9, y, 1.6, 1.0, "estimate +\nerror bar\n(public)", END_OK, size=10.8)
    arrow(ax, (2.7, y), (3.4, y))
    arrow(ax, (5.8, y), (6.6, y), "privatized\nreport", where=(6.25, y + 0.9))
    arrow(ax, (9.5, y), (10.1, y))
    ax.text(
        6.25,
        3.3,
        "ε-LDP holds from here on,\nwhatever the server does",
        ha="center",
        va="top",
        fontsize=10.2,
        color=INK,
    )
    # central
    y = 1.25
    box(ax, 1.3, y, 2.0, 1.0, "user's device\nlocal samples", CLIENT, size=10.8)
    box(
        ax,
        4.9,
        y,
        3.3,
        1.0,
        "trusted server: each row\nAES-GCM under the study's key"
        "\n(FEDLDP_KEY_DIR), never\nreturned; shredded at the end",
        SERVER,
        size=10.2,
    )
    box(ax, 8.4, y, 2.2, 1.0, "(ε, δ)-DP release\nat the smallest\ndeclared ε", SERVER, size=10.2)
    box(ax, 10.9, y, 1.6, 1.0, "released\nestimate\n(public)", END_OK, size=10.8)
    arrow(ax, (2.3, y), (3.25, y), "mean, count\nin clear", where=(2.85, y - 0.8))
    arrow(ax, (6.55, y), (7.3, y))
    arrow(ax, (9.5, y), (10.1, y))
    ax.text(
        8.4,
        0.35,
        "only the release is differentially private",
        ha="center",
        fontsize=10.2,
        color=INK,
    )
    return fig


def main() -> None:
    plt.rcParams["svg.hashsalt"] = "fedldp-docs"  # stable ids: a redraw changes nothing
    for name, draw in (("study-life", study_life), ("trust-model", trust_model)):
        fig = draw()
        fig.savefig(HERE / f"{name}.svg", metadata={"Date": None}, bbox_inches="tight")
        plt.close(fig)


if __name__ == "__main__":
    main()
