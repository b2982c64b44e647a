"""Charts more than one benchmark draws the same way."""

from __future__ import annotations

from collections.abc import Sequence
from pathlib import Path


def paired_bars(png: Path, labels: Sequence[str], bars: dict[str, Sequence[float]], *, xlabel: str, ylabel: str,
                title: str) -> None:
    """Two bars per label (``bars``: legend → one value per label), saved to ``png``."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    fig, ax = plt.subplots(figsize=(6, 3.5))
    for offset, (name, values) in zip((-0.2, 0.2), bars.items(), strict=True):
        ax.bar([i + offset for i in range(len(labels))], values, width=0.4, label=name)
    ax.set_xticks(range(len(labels)), labels)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.legend()
    fig.tight_layout()
    fig.savefig(png)
