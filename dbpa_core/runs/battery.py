"""Robustness batteries as runs (:class:`~dbpa_core.attacks.battery.BatteryResult`, by
name): one verdict per attack and ρ (its attack success rate, gated by ``--max-asr``)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Any

from markupsafe import Markup

from ..compare import BatteryComparison, compare_batteries
from ..fmt import table
from ..spec import model_label
from .base import (
    Answer,
    Comparison,
    Request,
    RunRefused,
    RunResult,
    Verdict,
    folder_name,
    num,
    register,
)


def comparison_lines(cmp: BatteryComparison) -> list[str]:
    """Two batteries side by side in words: ER and ASR per attack and ρ, and the verdict
    against the maximum ASR when one is given."""

    def pct(x: float | None) -> str:
        return "-" if x is None else f"{x:.3f}"

    def diff(x: float | None, y: float | None) -> str:
        return "-" if x is None or y is None else f"{y - x:+.3f}"

    rows = [
        (
            r.attack,
            f"{r.rho:g}",
            pct(r.er_a),
            pct(r.er_b),
            diff(r.er_a, r.er_b),
            pct(r.asr_a),
            pct(r.asr_b),
            diff(r.asr_a, r.asr_b),
            r.status.upper() if r.verdict_changed else r.status,
        )
        for r in cmp.rows
    ]
    ca, cb = cmp.clean_er
    out = [
        f"clean error rate: A {pct(ca)}, B {pct(cb)} ({diff(ca, cb)})",
        table(
            rows, ("attack", "rho", "ER A", "ER B", "ER change", "ASR A", "ASR B", "ASR change", "verdict")
        ),
        "",
    ]
    if cmp.max_asr is None:
        out.append(
            "A battery has no verdict of its own: give --max-asr X to count an attack "
            "whose success rate crossed X between the runs as a changed verdict."
        )
    else:
        out.append(f"{len(cmp.changed)} attack(s) crossed the maximum ASR {cmp.max_asr:g} between the runs.")
    return out


@dataclass
class BatteryRun(RunResult):
    """``batteries`` by name; ``max_asr``: the largest attack success rate that passes
    (``--max-asr``; None: the attacks are reported and never fail)."""

    batteries: Mapping[str, Any] = field(default_factory=dict)
    max_asr: float | None = None

    kind = "battery"
    label = "robustness battery"
    command = "attack"
    page = "Robustness battery"

    @classmethod
    def requests_of(cls, spec: Any) -> list[Request] | None:
        """A battery spec's samples: the answers (clean, attacked, re-instructed,
        re-ordered), every round of RTI (an upper bound: an item stops at the ρ where its
        answer changes) and the robustness curve's samples."""
        from ..attacks.spec import BatterySpec

        if not isinstance(spec, BatterySpec):
            return None
        from ..attacks.battery import battery_requests

        return [Request(r.part, spec.model, r.request, r.prompt) for r in battery_requests(spec)]

    @classmethod
    def estimate_of(cls, spec: Any, cache: Any = None) -> dict[str, Any] | None:
        """The calls, tokens and cost of a battery spec, counted from :meth:`requests_of`
        (:func:`dbpa_core.runs.costs.battery_estimate`)."""
        reqs = cls.requests_of(spec)
        if reqs is None:
            return None
        from .costs import battery_estimate

        return battery_estimate(spec, reqs, cache)

    def compare(self, other: RunResult, *, max_asr: float | None = None) -> Comparison:
        """ER and ASR of each attack at each ρ in both batteries; given ``max_asr``, an
        attack whose success rate crossed it is a changed verdict."""
        if not isinstance(other, BatteryRun) or not self.batteries or not other.batteries:
            raise RunRefused(f"a {self.label} is compared with another {self.label} only")
        first = [r.batteries.get("battery") or next(iter(r.batteries.values())) for r in (self, other)]
        cmp = compare_batteries(*first, max_asr=max_asr)
        return Comparison(
            tuple(comparison_lines(cmp)),
            tuple(f"{r.attack} rho={r.rho:g} ({r.status})" for r in cmp.changed),
            f"attack(s) crossed the maximum ASR {cmp.max_asr:g}" if cmp.max_asr is not None else "",
            cmp.to_dict(),
            cmp.settings_changed,
        )

    def verdicts(self) -> tuple[Verdict, ...]:
        from ..attacks.battery import ALL

        out: list[Verdict] = []
        for name, b in self.batteries.items():
            c = b.clean()
            pct = f"{b.spec.confidence:.0%}"
            out.append(
                Verdict(
                    name,
                    "clean error rate",
                    f"ER {c.er.value:.3f} [{c.er.low:.3f}, {c.er.high:.3f}], n = {c.er.n}",
                    kind="info",
                )
            )
            for r in b.attacks():
                a = r.asr
                if a is None:
                    continue
                numbers = (
                    f"ASR = {num(a.value)} ({a.count}/{a.n}, {pct} interval "
                    f"[{num(a.low, 2)}, {num(a.high, 2)}], {a.unparsed} unparsed), "
                    f"ER = {num(r.er.value)} against {num(c.er.value)} clean"
                )
                failed = self.max_asr is not None and a.value > self.max_asr
                out.append(
                    Verdict(
                        name,
                        f"{r.attack} rho={r.rho:g}",
                        f"attack success rate {a.value:.3f} [{a.low:.3f}, {a.high:.3f}], ER {r.er.value:.3f}",
                        kind="attack",
                        gate="asr" if self.max_asr is not None else None,
                        failed=failed,
                        message=(
                            f"{r.attack} at rho = {r.rho:g}: {numbers}; above the maximum "
                            f"ASR {self.max_asr:g}"
                            if failed
                            else numbers
                        ),
                        flag="fail" if failed else ("changed" if a.value > 0 else "unchanged"),
                    )
                )
            for rti in (x for x in b.rti if x.dataset == ALL):
                out.append(
                    Verdict(
                        name,
                        f"RTI {rti.attack}",
                        f"{rti.rti:.2f} (1 = the answer never changed)",
                        kind="info",
                    )
                )
            if b.curve:
                sig = sum(x.significant for x in b.curve)
                out.append(
                    Verdict(
                        name,
                        "robustness curve (DBPA)",
                        f"{sig} of {len(b.curve)} attacked prompts changed the answers significantly",
                        kind="curve",
                        flag="changed" if sig else "unchanged",
                    )
                )
        return tuple(out)

    def headline(self) -> str:
        parts = []
        for b in self.batteries.values():
            clean = b.clean()
            parts.append(
                f"{clean.er.n} items, clean error rate {clean.er.value:.2f}, "
                f"{len(b.attacks())} attack settings"
            )
        return "; ".join(parts)

    def answers(self) -> tuple[Answer, ...]:
        return tuple(
            Answer(
                name,
                f"{r.query.base.id}/{r.query.name}",
                i,
                r.response,
                prompt=r.query.prompt,
                role=r.query.kind,
                checks=(("correct", bool(r.correct)),),
            )
            for name, b in self.batteries.items()
            for i, r in enumerate(b.records)
        )

    def models(self) -> tuple[str, ...]:
        return tuple(dict.fromkeys(model_label(b.spec.model) for b in self.batteries.values()))

    def settings(self) -> dict[str, Any]:
        b = next(iter(self.batteries.values()))
        s = b.spec
        return {
            "spec": s.name,
            "source": s.source,
            "model": model_label(s.model),
            "items": len(s.items),
            "datasets": ", ".join(s.datasets),
            "seed": s.seed,
            "confidence": s.confidence,
            "temperature": s.temperature,
            "max_tokens": s.max_tokens,
        }

    def properties(self) -> dict[str, Any]:
        b = next(iter(self.batteries.values()))
        return {
            **self.settings(),
            "clean_error_rate": b.clean().er.value,
            "max_asr": self.max_asr if self.max_asr is not None else "none",
        }

    @property
    def seconds(self) -> float | None:
        return sum(float(b.usage.get("seconds", 0.0) or 0.0) for b in self.batteries.values())

    @property
    def used(self) -> int:
        return sum(int(b.usage.get("calls", 0) or 0) for b in self.batteries.values())

    def report_parts(self) -> list[str]:
        from ..attacks.battery import report_html

        return [Markup(report_html(b, title=name, section=True)) for name, b in self.batteries.items()]

    def payload(self) -> Any:
        return dict(self.batteries)

    def write(self, out_dir: str | os.PathLike[str]) -> list[str]:
        if len(self.batteries) == 1:
            return next(iter(self.batteries.values())).write(out_dir)
        return [p for n, b in self.batteries.items() for p in b.write(os.path.join(out_dir, folder_name(n)))]


@register("battery")
def adapt(title: str, value: Any) -> RunResult | None:
    from ..attacks.battery import BatteryResult

    if isinstance(value, BatteryResult):
        value = {"battery": value}
    if isinstance(value, Mapping) and value and all(isinstance(v, BatteryResult) for v in value.values()):
        first = next(iter(value.values()))
        return BatteryRun(
            title or first.spec.name,
            tuple(w for b in value.values() for w in b.warnings),
            batteries=dict(value),
        )
    return None
