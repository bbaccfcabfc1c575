"""The curves of bench/fp8_curves.sh's runs: the final validation loss of each model and recipe
with its difference from bf16's, printed as a Markdown table (the step times are left out: runs
that share the cores time each other; `dtrain bench step --fp8` measures the emulation's cost), and the training loss (a moving
mean over 25 steps) and validation loss of every run drawn side by side, one panel a model, into
an SVG file. Only the standard library.

    python3 bench/fp8_curves.py runs/fp8 docs/images/fp8-curves.svg
"""

import json
import os
import sys

RECIPES = [("none", "bf16", "#222222"), ("tensorwise", "tensorwise", "#1f77b4"),
           ("delayed", "delayed", "#d62728"), ("blockwise", "blockwise", "#2ca02c"),
           ("reseeded", "bf16, other init. weights", "#999999")]
MODELS = [("quickstart", "quickstart GPT-2 (4.3M)"), ("llama-tiny", "llama-tiny")]
WINDOW = 25


def read_run(path):
    losses, vals = {}, {}
    with open(path) as f:
        for line in f:
            record = json.loads(line)
            if "val_loss" in record:
                vals[record["step"]] = record["val_loss"]
            elif "loss" in record:
                losses[record["step"]] = record["loss"]  # a resumed run's repeated steps: the last
    return sorted(losses.items()), sorted(vals.items())


def moving_mean(points):
    out = []
    for i in range(WINDOW - 1, len(points)):
        window = points[i - WINDOW + 1:i + 1]
        out.append((points[i][0], sum(v for _, v in window) / WINDOW))
    return out


def table(runs):
    lines = ["| model | run | final validation loss | relative to bf16 |", "| --- | --- | --- | --- |"]
    for model, title in MODELS:
        base = runs.get((model, "none"))
        for recipe, label, _ in RECIPES:
            run = runs.get((model, recipe))
            if run is None or not run[1]:
                continue
            step, val = run[1][-1]
            diff = ""
            if recipe != "none" and base is not None:
                base_val = dict(base[1]).get(step)  # bf16's at the same step
                diff = "" if base_val is None else f"{100 * (val - base_val) / base_val:+.2f}%"
            lines.append(f"| {title} | {label} | {val:.4f} (step {step}) | {diff} |")
    return "\n".join(lines)


def panel(parts, left, top, w, h, title, xlabel, lines, dots, fmt):
    """One plot: `lines` and `dots` map a colour to [(x, y)]; y axis labels by `fmt`."""
    xs = [x for pts in list(lines.values()) + list(dots.values()) for x, _ in pts]
    ys = [y for pts in list(lines.values()) + list(dots.values()) for _, y in pts]
    if not xs:
        return
    x0, x1, y0, y1 = 0, max(xs), min(ys), max(ys)
    if y1 == y0:
        y0, y1 = y0 - 1, y1 + 1

    def at(x, y):
        return left + w * (x - x0) / (x1 - x0), top + h * (1 - (y - y0) / (y1 - y0))

    parts.append(f'<text x="{left + w / 2}" y="{top - 8}" text-anchor="middle" font-weight="bold">{title}</text>')
    parts.append(f'<rect x="{left}" y="{top}" width="{w}" height="{h}" fill="none" stroke="#888"/>')
    for i in range(5):
        y = y0 + (y1 - y0) * i / 4
        _, py = at(x0, y)
        parts.append(f'<text x="{left - 6}" y="{py + 4}" text-anchor="end">{fmt(y)}</text>')
        x = x0 + (x1 - x0) * i / 4
        px, _ = at(x, y0)
        parts.append(f'<text x="{px}" y="{top + h + 16}" text-anchor="middle">{int(x)}</text>')
    parts.append(f'<text x="{left + w / 2}" y="{top + h + 32}" text-anchor="middle">{xlabel}</text>')
    for colour, pts in lines.items():
        line = " ".join(f"{a:.1f},{b:.1f}" for a, b in (at(x, y) for x, y in pts))
        parts.append(f'<polyline points="{line}" fill="none" stroke="{colour}" stroke-width="1.2" opacity="0.85"/>')
    for colour, pts in dots.items():
        for x, y in pts:
            cx, cy = at(x, y)
            parts.append(f'<circle cx="{cx:.1f}" cy="{cy:.1f}" r="2.2" fill="{colour}"/>')


def svg(runs):
    """A column per model: the losses from step 100 (the first steps' fall would flatten the rest),
    and below them each recipe's smoothed training loss relative to bf16's, in percent."""
    width, height, pad = 460, 300, 55
    models = [m for m in MODELS if any((m[0], r[0]) in runs for r in RECIPES)]
    total = 2 * height + 20
    parts = [f'<svg xmlns="http://www.w3.org/2000/svg" width="{width * len(models)}" height="{total}" '
             f'font-family="sans-serif" font-size="12">',
             f'<rect width="{width * len(models)}" height="{total}" fill="white"/>']
    for p, (model, title) in enumerate(models):
        series = {r: runs[(model, r)] for r, _, _ in RECIPES if (model, r) in runs}
        colours = {r: c for r, _, c in RECIPES}
        smooth = {r: [(x, y) for x, y in moving_mean(s[0]) if x >= 100] for r, s in series.items()}
        left, w, h = p * width + pad, width - pad - 15, height - 30 - pad
        panel(parts, left, 30, w, h, f"{title}: loss", "step", {colours[r]: pts for r, pts in smooth.items()},
              {colours[r]: [(x, y) for x, y in s[1] if x >= 100] for r, s in series.items()}, lambda y: f"{y:.2f}")
        for i, (recipe, label, colour) in enumerate(r for r in RECIPES if r[0] in series):
            y = 30 + 14 + 16 * i
            parts.append(f'<line x1="{left + w - 175}" y1="{y - 4}" x2="{left + w - 155}" y2="{y - 4}" '
                         f'stroke="{colour}" stroke-width="2"/>')
            parts.append(f'<text x="{left + w - 149}" y="{y}">{label}</text>')
        base = dict(smooth.get("none", []))
        diffs = {colours[r]: [(x, 100 * (y - base[x]) / base[x]) for x, y in pts if x in base]
                 for r, pts in smooth.items() if r != "none"}
        panel(parts, left, height + 30, w, h, f"{title}: training loss to bf16's", "step", diffs, {},
              lambda y: f"{y:+.2f}%")
    parts.append(f'<text x="10" y="{total - 6}" fill="#555">lines: training loss, mean of {WINDOW} steps; '
                 'dots: validation loss</text>')
    parts.append("</svg>")
    return "\n".join(parts) + "\n"


def main():
    root, out = sys.argv[1], sys.argv[2]
    runs = {}
    for model, _ in MODELS:
        for recipe, _, _ in RECIPES:
            path = os.path.join(root, f"{model}-{recipe}", "metrics.jsonl")
            if os.path.exists(path):
                runs[(model, recipe)] = read_run(path)
    print(table(runs))
    with open(out, "w") as f:
        f.write(svg(runs))
    print(f"fp8_curves.py: wrote {out}")


if __name__ == "__main__":
    main()
