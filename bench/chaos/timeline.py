"""The soak's timeline PNG: who led when (per replica), faults, and task completions over time.

Top panel: one row per replica, a bar for each leadership term (from ``leader_terms``: acquired
until its recorded end, or until the next term for terms that ended by crash), and the lock
holder as sampled from ``pg_locks`` as a thin line under it; faults are vertical lines coloured
by kind. Bottom panel: task instances finished (cumulative). Needs matplotlib (``bench`` extra);
:func:`plot` returns None when it is not installed.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

COLOURS = {"sigkill": "tab:red", "sigterm": "tab:orange", "sigstop": "tab:purple", "terminate_lock": "tab:brown",
           "pg_restart": "tab:gray", "partition": "tab:cyan"}


def plot(path: Path, *, t0: float, nodes: list[str], terms: list[dict[str, Any]],
         samples: list[tuple[float, str | None]], faults: list[dict[str, Any]], completions: list[float],
         title: str) -> Path | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    fig, (top, bottom) = plt.subplots(2, 1, figsize=(14, 7), sharex=True, gridspec_kw={"height_ratios": [2, 1]})
    rows = {node: i for i, node in enumerate(nodes)}
    end_of_time = max([s[0] for s in samples] + completions + [t0 + 1]) - t0
    for i, term in enumerate(terms):
        row = rows.get(term["node"])
        if row is None:
            continue
        start = term["acquired"] - t0
        if term["ended"] is not None:
            stop = term["ended"] - t0
        elif i + 1 < len(terms):
            stop = terms[i + 1]["acquired"] - t0
        else:
            stop = end_of_time
        top.broken_barh([(start, max(stop - start, 0.05))], (row - 0.3, 0.45), facecolors="tab:green", alpha=0.8)
        top.text(start, row + 0.2, str(term["term"]), fontsize=6)
    xs = [s[0] - t0 for s in samples]
    ys = [rows[s[1]] - 0.4 if s[1] in rows else -0.8 for s in samples]
    top.plot(xs, ys, drawstyle="steps-post", linewidth=0.6, color="black", label="lock holder (pg_locks)")
    seen = set()
    for f in faults:
        kind = f["kind"]
        top.axvline(f["at"] - t0, color=COLOURS.get(kind, "black"), linewidth=1,
                    label=kind if kind not in seen else None)
        bottom.axvline(f["at"] - t0, color=COLOURS.get(kind, "black"), linewidth=0.5, alpha=0.5)
        seen.add(kind)
    top.set_yticks([*rows.values(), -0.8], [*rows.keys(), "nobody"])
    top.set_ylim(-1.2, len(nodes))
    top.set_title(title)
    top.legend(loc="upper right", fontsize=7, ncol=4)
    done = sorted(c - t0 for c in completions)
    bottom.plot(done, range(1, len(done) + 1), color="tab:blue")
    bottom.set_ylabel("tasks finished")
    bottom.set_xlabel("seconds since start")
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
    return path
