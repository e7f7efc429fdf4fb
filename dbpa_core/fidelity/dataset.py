"""The fidelity data model: real and simulated answers per scenario (:class:`FidelityData`,
its :class:`Scenario` records) and :func:`validate`, which checks one built in code.

The readers of files (:mod:`dbpa_core.fidelity.data`) and the built-in sample
(:mod:`dbpa_core.fidelity.sample`) both build on this module.
"""

from __future__ import annotations

import csv
import functools
import io
from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np

RESERVED = ("scenario", "option", "real", "question")
UNIFORM = "uniform"
PROB_TOLERANCE = 1e-3


class FidelityDataError(ValueError):
    """A data file or data argument is malformed (the message says where and what)."""


@dataclass(frozen=True)
class Scenario:
    """One scenario (question): its options (empty for values data), the real answers
    (counts per option, or values), the question text and the respondent's fields."""

    id: str
    options: tuple[str, ...]
    real: np.ndarray
    question: str = ""
    persona: tuple[tuple[str, str], ...] = ()

    @functools.cached_property
    def n(self) -> float:
        """The number of real answers (the sum of counts, or of values; computed once: a
        large analysis asks for it several times per scenario)."""
        return float(self.real.sum()) if self.options else float(self.real.size)

    def option_values(self) -> np.ndarray:
        """The options' values: their labels when all are numbers, else evenly spaced on
        [-1, 1] in their order."""
        try:
            v = np.array([float(o) for o in self.options])
            if np.all(np.isfinite(v)) and len(set(v.tolist())) == len(v):
                return v
        except ValueError:
            pass
        return np.linspace(-1.0, 1.0, len(self.options))


@dataclass(frozen=True)
class FidelityData:
    """Real and simulated answers for m scenarios.

    ``simulated[name][j]`` is simulator ``name``'s answers in scenario j: counts or
    probabilities over ``scenarios[j].options`` (categorical), or values. ``sim_kinds``
    says which (``counts``, ``probabilities``, ``values``); ``notes`` holds what the
    reader wants the user to know (e.g. unparsed answers of a simulation).
    """

    kind: str
    scenarios: tuple[Scenario, ...]
    simulated: dict[str, tuple[np.ndarray, ...]] = field(default_factory=dict)
    sim_kinds: dict[str, str] = field(default_factory=dict)
    source: str = "<data>"
    notes: tuple[str, ...] = ()
    #: the uniform baseline's own draws (counts per option, or values on [0, 1] to be
    #: scaled to the bounds), or None for the exact uniform distribution (1/d)
    baseline: tuple[np.ndarray, ...] | None = None

    @property
    def simulators(self) -> tuple[str, ...]:
        return tuple(self.simulated)

    @property
    def ids(self) -> tuple[str, ...]:
        return tuple(s.id for s in self.scenarios)

    @property
    def m(self) -> int:
        return len(self.scenarios)

    def probabilities(self, name: str) -> list[np.ndarray]:
        """Simulator ``name``'s distribution per scenario (``uniform``: its draws when
        :attr:`baseline` holds them, else 1/d each)."""
        if name == UNIFORM:
            if self.baseline is not None:
                return [c / c.sum() for c in map(np.asarray, self.baseline)]
            return [np.full(len(s.options), 1.0 / len(s.options)) for s in self.scenarios]
        return [v / v.sum() for v in (np.asarray(x, dtype=float) for x in self.simulated[name])]

    def real_probabilities(self) -> list[np.ndarray]:
        return [s.real / s.real.sum() for s in self.scenarios]

    def with_simulator(self, name: str, answers: Sequence, kind: str = "counts") -> FidelityData:
        """A copy with one more simulator column (validated like a file's)."""
        if name in self.simulated or name.lower() in RESERVED or name == UNIFORM:
            raise FidelityDataError(f"a simulator named {name!r} exists already or the name is reserved.")
        arrays = tuple(np.asarray(a, dtype=float) for a in answers)
        sims = dict(self.simulated)
        sims[name] = arrays
        kinds = dict(self.sim_kinds)
        kinds[name] = kind
        out = replace(self, simulated=sims, sim_kinds=kinds)
        validate(out)
        return out

    def select(self, ids: Sequence[str]) -> FidelityData:
        """The scenarios with these ids, in this order."""
        pos = {s.id: j for j, s in enumerate(self.scenarios)}
        missing = [i for i in ids if i not in pos]
        if missing:
            raise FidelityDataError(f"no scenario {missing[0]!r} in {self.source}.")
        idx = [pos[i] for i in ids]
        return replace(
            self,
            scenarios=tuple(self.scenarios[j] for j in idx),
            simulated={k: tuple(v[j] for j in idx) for k, v in self.simulated.items()},
            baseline=None if self.baseline is None else tuple(self.baseline[j] for j in idx),
        )

    def without_simulators(self) -> FidelityData:
        return replace(self, simulated={}, sim_kinds={}, baseline=None)

    def answers_per_question(self) -> np.ndarray | None:
        """How many answers the simulators drew per question: the mean over the simulators
        given as counts (or values) of each question's total, rounded; None when no
        simulator gives counts (probabilities only, or none)."""
        kinds = ("counts",) if self.kind == "categorical" else ("values",)
        sims = [n for n in self.simulated if self.sim_kinds.get(n) in kinds]
        if not sims:
            return None
        tot = np.array(
            [
                row_sums(self.simulated[n])
                if self.kind == "categorical"
                else [float(np.size(a)) for a in self.simulated[n]]
                for n in sims
            ]
        )
        return np.maximum(1, np.rint(tot.mean(axis=0))).astype(int)

    def with_drawn_baseline(self, k: int | Sequence[int] | np.ndarray, *, seed: int = 0) -> FidelityData:
        """A copy whose uniform baseline answers like a simulator: ``k[j]`` answers to
        question j drawn uniformly at random (``np.random.default_rng(seed)``): counts over
        the options, or values on [0, 1] (scaled to the data's bounds by the analysis)."""
        k = np.broadcast_to(np.asarray(k, dtype=int), (self.m,))
        rng = np.random.default_rng(seed)
        if self.kind == "categorical":
            draws = tuple(
                rng.multinomial(int(kj), np.full(len(s.options), 1.0 / len(s.options))).astype(float)
                for kj, s in zip(k, self.scenarios, strict=True)
            )
        else:
            draws = tuple(rng.uniform(0.0, 1.0, int(kj)) for kj in k)
        return replace(self, baseline=draws)

    def to_csv(self) -> str:
        """The data as a long CSV in the layout :func:`parse_csv` reads."""
        buf = io.StringIO()
        w = csv.writer(buf, lineterminator="\n")
        has_q = any(s.question for s in self.scenarios)
        sims = list(self.simulated)
        if self.kind == "categorical":
            w.writerow(["scenario", "option", "real", *sims, *(["question"] if has_q else [])])
            for j, s in enumerate(self.scenarios):
                for i, opt in enumerate(s.options):
                    row = [s.id, opt, _num(s.real[i]), *(_num(self.simulated[k][j][i]) for k in sims)]
                    if has_q:
                        row.append(s.question if i == 0 else "")
                    w.writerow(row)
        else:
            w.writerow(["scenario", "real", *sims, *(["question"] if has_q else [])])
            for j, s in enumerate(self.scenarios):
                cols = [s.real, *(self.simulated[k][j] for k in sims)]
                for i in range(max(len(c) for c in cols)):
                    row = [s.id, *(_num(c[i]) if i < len(c) else "" for c in cols)]
                    if has_q:
                        row.append(s.question if i == 0 else "")
                    w.writerow(row)
        return buf.getvalue()


def _num(x: float) -> str:
    x = float(x)
    return str(int(x)) if x.is_integer() and abs(x) < 1e15 else repr(x)


# --------------------------------------------------------------------------- validation


def validate(data: FidelityData) -> FidelityData:
    """Check a :class:`FidelityData` built in code (files are checked as they are read).

    Raises
    ------
    FidelityDataError
        Fewer than 2 scenarios; repeated scenario ids; a scenario with fewer than 2
        options, negative, non-finite or all-zero real counts (no real values), real
        counts given as shares (they sum to 1 and are not whole numbers); a
        simulator whose answers do not match a scenario's options, are negative or all
        zero (no values).
    """
    if data.kind not in ("categorical", "values"):
        raise FidelityDataError(f"`kind` must be 'categorical' or 'values', got {data.kind!r}.")
    if len(data.scenarios) < 2:
        raise FidelityDataError(
            f"{data.source}: needs at least 2 scenarios (m >= 2), found {len(data.scenarios)}."
        )
    if _quick_valid(data):
        return data
    seen: set[str] = set()
    for s in data.scenarios:
        if s.id in seen:
            raise FidelityDataError(f"{data.source}: scenario {s.id!r} appears twice.")
        seen.add(s.id)
        real = np.asarray(s.real, dtype=float)
        if not np.all(np.isfinite(real)):
            raise FidelityDataError(f"scenario {s.id!r}: the real answers must be finite numbers.")
        if data.kind == "categorical":
            if len(s.options) < 2:
                raise FidelityDataError(
                    f"scenario {s.id!r} has {len(s.options)} option(s); a question needs at least 2."
                )
            if real.shape != (len(s.options),):
                raise FidelityDataError(
                    f"scenario {s.id!r}: {real.size} real counts for {len(s.options)} options."
                )
            if np.any(real < 0):
                raise FidelityDataError(f"scenario {s.id!r}: negative real counts.")
            if real.sum() <= 0:
                raise FidelityDataError(f"scenario {s.id!r}: the real counts are all zero.")
            if (msg := shares_problem(s.id, real)) is not None:
                raise FidelityDataError(f"{data.source}: {msg}")
        elif real.size < 1:
            raise FidelityDataError(f"scenario {s.id!r} has no real values.")
    for name, answers in data.simulated.items():
        if name == UNIFORM or name.lower() in RESERVED:
            raise FidelityDataError(f"a simulator may not be called {name!r} (a reserved name).")
        if len(answers) != len(data.scenarios):
            raise FidelityDataError(
                f"simulator {name!r} answers {len(answers)} scenarios, the data have {len(data.scenarios)}."
            )
        for s, a in zip(data.scenarios, answers, strict=True):
            a = np.asarray(a, dtype=float)
            if not np.all(np.isfinite(a)):
                raise FidelityDataError(
                    f"simulator {name!r}, scenario {s.id!r}: the answers must be finite numbers."
                )
            if data.kind == "categorical":
                if a.shape != (len(s.options),):
                    raise FidelityDataError(
                        f"simulator {name!r}, scenario {s.id!r}: {a.size} values for "
                        f"{len(s.options)} options ({', '.join(s.options)}); the simulated "
                        "distribution must match the options."
                    )
                if np.any(a < 0):
                    raise FidelityDataError(f"simulator {name!r}, scenario {s.id!r}: negative values.")
                if a.sum() <= 0:
                    raise FidelityDataError(
                        f"simulator {name!r} gives scenario {s.id!r} no answer (all zero)."
                    )
            elif a.size < 1:
                raise FidelityDataError(f"simulator {name!r} gives scenario {s.id!r} no values.")
    return data


def row_sums(arrays: Sequence) -> np.ndarray:
    """The sum of each of several non-empty 1-D arrays, in one numpy call."""
    flat = [np.asarray(a, dtype=float).ravel() for a in arrays]
    starts = np.concatenate([[0], np.cumsum([a.size for a in flat])[:-1]]).astype(int)
    return np.add.reduceat(np.concatenate(flat), starts)


def _quick_valid(data: FidelityData) -> bool:
    """True when the whole of ``data`` passes :func:`validate`'s checks, tested on all
    scenarios at once (a few numpy calls instead of several per scenario); False sends
    :func:`validate` through them one by one, to name the first problem."""
    scen = data.scenarios
    ids = [s.id for s in scen]
    if len(set(ids)) != len(ids):
        return False
    for name, answers in data.simulated.items():
        if name == UNIFORM or name.lower() in RESERVED or len(answers) != len(scen):
            return False
    if data.kind != "categorical":
        return False  # real values: checked one by one (rare, small)
    sizes = [len(s.options) for s in scen]
    if min(sizes) < 2:
        return False
    arrays = [np.asarray(s.real, dtype=float) for s in scen]
    groups = [arrays] + [[np.asarray(a, dtype=float) for a in answers] for answers in data.simulated.values()]
    starts = np.concatenate([[0], np.cumsum(sizes)[:-1]])
    for group in groups:
        if any(a.ndim != 1 or a.size != n for a, n in zip(group, sizes, strict=True)):
            return False
        flat = np.concatenate(group)
        if not np.all(np.isfinite(flat)) or np.any(flat < 0):
            return False
        totals = np.add.reduceat(flat, starts)
        if np.any(totals <= 0):
            return False
        if group is arrays:
            near_one = np.flatnonzero(np.abs(totals - 1.0) <= SHARE_TOLERANCE)
            if any(shares_problem(scen[j].id, arrays[j]) is not None for j in near_one):
                return False
    return True


#: real counts whose sum lies this close to 1 and that are not whole numbers are shares
SHARE_TOLERANCE = 0.02


def shares_problem(sid: str, real: np.ndarray) -> str | None:
    """The message for real answers given as shares (0.6, 0.4, as toplines are published),
    which would be read as one respondent per question; None for counts. Whole numbers
    summing to 1 are one respondent; weighted counts (2.5, 7.25) sum to more than 1."""
    total = float(real.sum())
    if abs(total - 1.0) > SHARE_TOLERANCE or np.all(real == np.round(real)):
        return None
    return (
        f"the real answers of scenario {sid!r} look like shares (they sum to {total:.3g}); "
        "`real` must hold counts of answers (how many respondents chose each option), "
        "because the confidence sets shrink with the number of respondents. Multiply the "
        "shares by the number of respondents."
    )


__all__ = [
    "PROB_TOLERANCE",
    "RESERVED",
    "SHARE_TOLERANCE",
    "UNIFORM",
    "FidelityData",
    "FidelityDataError",
    "Scenario",
    "validate",
]
