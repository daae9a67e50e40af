"""PNG plots of metric curves. matplotlib is imported here, lazily, so the server starts without it."""

import io

Curve = tuple[str, list[float], list[float]]  # (name, steps, values)


def _moving_average(y: list[float], window: int) -> list[float]:
    out, acc = [], 0.0
    for i, v in enumerate(y):
        acc += v
        if i >= window:
            acc -= y[i - window]
        out.append(acc / min(i + 1, window))
    return out


def metric_curves_png(curves: list[Curve], lr: Curve | None = None, title: str = "") -> bytes:
    """Raw curves (thin) with their moving average (thick); the learning rate on a second axis."""
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError as e:
        from tools.errors import TriageError
        raise TriageError("plot=True needs matplotlib, which is not installed in the server's environment",
                          "pip install 'mltriage[plot]' (or matplotlib), or call log_metrics without plot") from e

    fig, ax = plt.subplots(figsize=(8, 4.5), dpi=100)
    try:
        positive = True
        for i, (name, steps, y) in enumerate(curves):
            if not y:
                continue
            color = f"C{i}"
            ax.plot(steps, y, color=color, alpha=0.35, linewidth=0.8, label=f"{name} (raw)")
            ax.plot(steps, _moving_average(y, max(1, len(y) // 50)), color=color, linewidth=2, label=f"{name} (moving avg)")
            positive = positive and min(y) > 0
        if positive and any(c[2] and max(c[2]) / min(c[2]) > 100 for c in curves):
            ax.set_yscale("log")  # losses spanning orders of magnitude
        ax.set_xlabel("step")
        ax.set_ylabel(", ".join(c[0] for c in curves))
        ax.grid(alpha=0.3)
        handles, labels = ax.get_legend_handles_labels()
        if lr and lr[2]:
            ax2 = ax.twinx()
            ax2.plot(lr[1], lr[2], color="gray", linestyle="--", linewidth=1.2, label=lr[0])
            ax2.set_ylabel(lr[0])
            h2, l2 = ax2.get_legend_handles_labels()
            handles, labels = handles + h2, labels + l2
        ax.legend(handles, labels, fontsize=8, loc="best")
        if title:
            ax.set_title(title)
        fig.tight_layout()
        buf = io.BytesIO()
        fig.savefig(buf, format="png")
        return buf.getvalue()
    finally:
        plt.close(fig)
