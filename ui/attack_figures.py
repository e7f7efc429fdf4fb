"""Battery result -> Plotly figures (no Streamlit, no statistics beyond arranging what
the result carries), and the HTML report with the charts."""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Mapping

import plotly.graph_objects as go
from plotly.subplots import make_subplots

from dbpa_core.attacks.battery import ALL, BatteryResult, report_html

from .figures import ACCENT, ALT_COLOR, NULL_COLOR, base_layout

ER_COLOR = "#E15759"
ASR_COLOR = NULL_COLOR
GREY = "#9AA5B1"
PALETTE = ("#3B6FD8", "#F28E2B", "#59A14F", "#B07AA1", "#EDC948", "#76B7B2", "#FF9DA7")


def _err(low, high, value):
    return dict(
        type="data",
        symmetric=False,
        array=[h - v for h, v in zip(high, value, strict=True)],
        arrayminus=[v - lo for lo, v in zip(low, value, strict=True)],
        thickness=1.2,
        width=3,
    )


def er_asr_figure(result: BatteryResult, dataset: str = ALL) -> go.Figure:
    """ER and ASR with their intervals per attack and ρ (the paper's Table 7 as bars); the
    dotted line is the clean ER."""
    rows = result.attacks(dataset)
    x = [f"{r.attack}<br>ρ = {r.rho:g}" for r in rows]
    fig = go.Figure()
    for name, color, get in (
        ("ER (wrong)", ER_COLOR, lambda r: r.er),
        ("ASR (answer changed)", ASR_COLOR, lambda r: r.asr),
    ):
        rates = [get(r) for r in rows]
        v = [q.value for q in rates]
        fig.add_trace(
            go.Bar(
                x=x,
                y=v,
                name=name,
                marker_color=color,
                error_y=_err([q.low for q in rates], [q.high for q in rates], v),
                customdata=[[q.n, q.unparsed] for q in rates],
                hovertemplate="%{x}<br>" + name + " = %{y:.2f}<br>n = %{customdata[0]}, unparsed = "
                "%{customdata[1]}<extra></extra>",
            )
        )
    clean = result.clean(dataset).er
    if x:
        fig.add_trace(
            go.Scatter(
                x=x,
                y=[clean.value] * len(x),
                mode="lines",
                name=f"clean ER {clean.value:.2f}",
                line=dict(dash="dot", color="#1F2933", width=2),
                hovertemplate=f"clean ER = {clean.value:.2f}<extra></extra>",
            )
        )
    fig.update_yaxes(title_text="share of items", range=[0, 1.08])
    fig.update_layout(barmode="group", bargap=0.25)
    title = "ER and ASR per attack" + ("" if dataset == ALL else f" — {dataset}")
    return base_layout(fig, title=title, height=420)


def dataset_heatmap(result: BatteryResult, metric: str = "er") -> go.Figure:
    """Data sets (rows) × clean and attacks (columns): colour and text = ER (or ASR)."""
    datasets = list(result.datasets)
    cols = ["clean"] + [f"{r.attack} ρ={r.rho:g}" for r in result.attacks()]
    z, text = [], []
    for ds in datasets:
        clean = result.clean(ds) if len(datasets) > 1 else result.clean()
        rows = result.attacks(ds) if len(datasets) > 1 else result.attacks()
        vals = [clean.er.value if metric == "er" else None] + [
            (r.er if metric == "er" else r.asr).value for r in rows
        ]
        z.append(vals)
        text.append(["–" if v is None else f"{v:.2f}" for v in vals])
    fig = go.Figure(
        go.Heatmap(
            z=z,
            x=cols,
            y=datasets,
            text=text,
            texttemplate="%{text}",
            colorscale="YlOrRd",
            zmin=0,
            zmax=1,
            hoverinfo="skip",
            colorbar=dict(title=metric.upper()),
        )
    )
    fig.update_yaxes(autorange="reversed")
    what = "ER (share wrong)" if metric == "er" else "ASR (share changed)"
    return base_layout(fig, title=f"{what} per data set", height=140 + 45 * len(datasets))


def rti_figure(result: BatteryResult) -> go.Figure | None:
    """RTI per word-level attack and data set, with t intervals (the paper's Table 13)."""
    if not result.rti:
        return None
    groups = [ALL] + [d for d in result.datasets if len(result.datasets) > 1]
    fig = go.Figure()
    for i, ds in enumerate(groups):
        rows = [r for r in result.rti if r.dataset == ds]
        v = [r.rti for r in rows]
        lo = [r.result.low if r.result.low == r.result.low else r.rti for r in rows]
        hi = [r.result.high if r.result.high == r.result.high else r.rti for r in rows]
        fig.add_trace(
            go.Bar(
                x=[r.attack for r in rows],
                y=v,
                name=ds,
                marker_color="#1F2933" if ds == ALL else PALETTE[(i - 1) % len(PALETTE)],
                error_y=_err(lo, hi, v),
                hovertemplate=ds + ": %{x} RTI = %{y:.2f}<extra></extra>",
            )
        )
    fig.add_hline(
        y=1.0,
        line_dash="dot",
        line_color=GREY,
        annotation_text="never changes (memorized, or the passage is ignored)",
        annotation_position="top left",
    )
    fig.update_yaxes(title_text="RTI: mean ρ of the first change", range=[0, 1.12])
    fig.update_layout(barmode="group")
    return base_layout(fig, title="Relative training index per word-level attack", height=400)


def curve_figure(result: BatteryResult) -> go.Figure | None:
    """The robustness curve: ω above chance of the attacked prompt's responses against the
    clean prompt's, per ρ; a filled marker is significant after correction."""
    if not result.curve:
        return None
    fig = go.Figure()
    by: dict[tuple[str, str], list] = defaultdict(list)
    for r in result.curve:
        by[(r.attack, r.item)].append(r)
    attacks = list(dict.fromkeys(r.attack for r in result.curve))
    for (attack, item), rows in by.items():
        rows = sorted(rows, key=lambda r: r.rho)
        color = PALETTE[attacks.index(attack) % len(PALETTE)]
        fig.add_trace(
            go.Scatter(
                x=[r.rho for r in rows],
                y=[r.effect_above_chance for r in rows],
                mode="lines+markers",
                name=f"{attack} · {item}",
                line=dict(color=color, width=2),
                marker=dict(
                    size=10,
                    color=[color if r.significant else "white" for r in rows],
                    line=dict(color=color, width=2),
                ),
                customdata=[[r.p_adjusted, r.changed_words, r.stars] for r in rows],
                hovertemplate=f"{attack} · {item}<br>ρ = %{{x}}<br>ω − chance = %{{y:.3f}}<br>"
                "p (adj.) = %{customdata[0]:.3g} %{customdata[2]}<br>"
                "words changed: %{customdata[1]}<extra></extra>",
            )
        )
    fig.add_hline(
        y=0,
        line_dash="dot",
        line_color=GREY,
        annotation_text="sampling noise",
        annotation_position="bottom right",
    )
    fig.update_xaxes(title_text="ρ: share of words attacked", range=[0, 1.05])
    fig.update_yaxes(title_text="ω above chance")
    base_layout(fig, title="Robustness curve (filled: significant change in what the model says)", height=460)
    fig.update_layout(
        legend=dict(orientation="h", yanchor="top", y=-0.2, xanchor="left", x=0), margin=dict(b=110)
    )
    return fig


def consistency_figure(result: BatteryResult) -> go.Figure | None:
    """Box plots of accuracy over synonymous instructions and over option orders, per data
    set (each point is one instruction or one order)."""
    kinds = [k for k in ("instructions", "option_orders") if any(r.kind == k for r in result.consistency)]
    if not kinds:
        return None
    titles = [
        f"{'Synonymous instructions' if k == 'instructions' else 'Option orders'} "
        f"(std {result.consistency_std(k):.3f})"
        for k in kinds
    ]
    fig = make_subplots(rows=1, cols=len(kinds), subplot_titles=titles, shared_yaxes=True)
    groups = [ALL] + [d for d in result.datasets if len(result.datasets) > 1]
    for j, kind in enumerate(kinds):
        for i, ds in enumerate(groups):
            rows = [r for r in result.consistency if r.kind == kind and r.dataset == ds]
            fig.add_trace(
                go.Box(
                    y=[r.accuracy.value for r in rows],
                    name=ds,
                    boxpoints="all",
                    jitter=0.3,
                    pointpos=0,
                    text=[r.label for r in rows],
                    legendgroup=ds,
                    showlegend=j == 0,
                    marker_color="#1F2933" if ds == ALL else PALETTE[(i - 1) % len(PALETTE)],
                    hovertemplate="%{text}<br>accuracy = %{y:.2f}<extra>" + ds + "</extra>",
                ),
                row=1,
                col=j + 1,
            )
    fig.update_yaxes(title_text="accuracy", range=[-0.02, 1.02], row=1, col=1)
    base_layout(fig, height=440)
    fig.update_annotations(font=dict(size=13, color="#1F2933"))
    # the legend below the plots: above them it covers the subplot titles
    fig.update_layout(
        legend=dict(orientation="h", yanchor="top", y=-0.12, xanchor="left", x=0), margin=dict(b=90)
    )
    return fig


def _share_bars(rows, label: str, title: str) -> go.Figure:
    """Share among attacked words of successful attacks beside the share among all
    attacked words (``rows`` have ``value``, ``share``, ``base_share`` and ``lift``)."""
    x = [p.value for p in rows]
    fig = go.Figure()
    fig.add_trace(
        go.Bar(
            x=x,
            y=[p.share for p in rows],
            name="successful attacks",
            marker_color=ALT_COLOR,
            customdata=[p.lift for p in rows],
            hovertemplate="%{x}: %{y:.2f} (lift %{customdata:.2f})<extra></extra>",
        )
    )
    fig.add_trace(
        go.Bar(
            x=x,
            y=[p.base_share for p in rows],
            name="all attacked words",
            marker_color=GREY,
            hovertemplate="%{x}: %{y:.2f}<extra></extra>",
        )
    )
    fig.update_xaxes(title_text=label)
    fig.update_yaxes(title_text="share of attacked words")
    fig.update_layout(barmode="group")
    return base_layout(fig, title=title, height=380)


def patterns_figure(result: BatteryResult, feature: str = "position", level: str = ALL) -> go.Figure | None:
    """Share of attacked words of successful attacks (each item weighing 1) by position,
    part of speech or dependency, beside their share among all attacked words."""
    rows = [p for p in result.patterns if p.feature == feature and p.level == level]
    if not rows:
        return None
    if feature != "position":
        rows = rows[:12]
    label = {"position": "position in the text", "pos": "part of speech", "dep": "dependency relation"}[
        feature
    ]
    return _share_bars(rows, label, f"Which words break it: {label}")


def phrase_figure(result: BatteryResult, level: str = ALL) -> go.Figure | None:
    """The phrase table as bars: the share of attacked words in each phrase type among
    attacks that changed the answer, beside the share among all attacks (types never
    attacked are left out)."""
    ph = result.phrases
    rows = [r for r in ph.rows(level) if r.words] if ph is not None else []
    if not rows:
        return None
    return _share_bars(rows, "phrase type of the attacked word", "Which phrases break it")


def importance_figure(result: BatteryResult) -> go.Figure | None:
    """The random forest's permutation importances (held-out accuracy lost when a feature
    is shuffled, ± its standard deviation over the shuffles), most important on top; the
    title gives the held-out accuracy beside the majority baseline, and the bars are grey
    when the forest does not beat it."""
    f = result.phrases.forest if result.phrases is not None else None
    if f is None or not f.fitted:
        return None
    # features the forest never split on (never attacked, or no use) are left out; the
    # plotly draws the first bar at the bottom
    ranked = [i for i in f.ranked() if i.impurity > 0 or i.mean != 0][::-1]
    v = [i.mean for i in ranked]
    fig = go.Figure(
        go.Bar(
            y=[i.feature for i in ranked],
            x=v,
            orientation="h",
            marker_color=[ACCENT if i.mean > 0 and f.beats_baseline else GREY for i in ranked],
            error_x=dict(type="data", array=[i.std for i in ranked], thickness=1.2, width=3),
            customdata=[[i.std, i.impurity] for i in ranked],
            hovertemplate="%{y}: accuracy −%{x:.3f} when shuffled (sd %{customdata[0]:.3f})<br>"
            "impurity importance %{customdata[1]:.3f}<extra></extra>",
        )
    )
    fig.add_vline(x=0, line_color=GREY, line_dash="dot")
    fig.update_xaxes(title_text="held-out accuracy lost when the feature is shuffled")
    title = (
        f"What predicts a changed answer (random forest)<br><sup>held-out accuracy "
        f"{f.accuracy:.2f}; always guessing the more frequent outcome: {f.baseline:.2f}"
        + ("" if f.beats_baseline else " — no better, so the bars say little")
        + "</sup>"
    )
    base_layout(fig, title=title, height=140 + 32 * len(ranked))
    fig.update_layout(showlegend=False, margin=dict(l=120, t=80))
    return fig


def battery_figures(result: BatteryResult) -> dict[str, go.Figure | None]:
    """Every chart of a result, by title (for the page and the report)."""
    return {
        "ER and ASR per attack": er_asr_figure(result),
        "ER per data set": dataset_heatmap(result, "er") if len(result.datasets) > 1 else None,
        "RTI": rti_figure(result),
        "Robustness curve": curve_figure(result),
        "Consistency": consistency_figure(result),
        "Attacked words by position": patterns_figure(result, "position"),
        "Attacked words by part of speech": patterns_figure(result, "pos"),
        "Attacked words by phrase type": phrase_figure(result),
        "What predicts a changed answer": importance_figure(result),
    }


def html_report(result: BatteryResult, figures: Mapping[str, go.Figure | None]) -> str:
    """The core report (tables, examples, all text escaped) with the charts inlined."""
    charts, first = [], True
    for name, fig in figures.items():
        if fig is None:
            continue
        charts.append(
            f"<h3>{name}</h3>" + fig.to_html(full_html=False, include_plotlyjs=True if first else False)
        )
        first = False
    return report_html(result, charts_html="".join(charts))


__all__ = [
    "ACCENT",
    "battery_figures",
    "consistency_figure",
    "curve_figure",
    "dataset_heatmap",
    "er_asr_figure",
    "html_report",
    "importance_figure",
    "patterns_figure",
    "phrase_figure",
    "rti_figure",
]
