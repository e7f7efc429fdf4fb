"""Which features of an attack predict that the answer changed: a random forest over
per-item frequency vectors, its held-out accuracy and permutation importances.

Each row is one attacked prompt: ``X`` its features (the share of its attacked words in
each phrase group, see :mod:`~dbpa_core.attacks.phrases`, and the share of its words
attacked), ``y`` whether the answer changed. Rows of the same item are correlated (the
same passage at several ρ and levels), so the forest is judged by **grouped
cross-validation**: the items are split into ``folds`` groups (scikit-learn's
``GroupKFold``), and each row is predicted by a forest that never saw its item. The
held-out accuracy is the share of rows predicted right that way, beside the **majority
baseline** — always predicting the training folds' more frequent outcome — which a
forest that learnt anything must beat.

**Permutation importance** of a feature: the held-out accuracy lost when that feature's
column is shuffled within each held-out fold (``repeats`` shuffles; mean and standard
deviation over them). A feature the forest does not use loses nothing (0); one it relies
on loses accuracy. Unlike the forests' impurity importance (given beside it, the mean
over the folds' forests), it is measured on items the forest did not see, so a feature
that only helped to memorize the training rows gets none. The defaults (100 trees, 10
shuffles) cost about half a second of CPU for 2,000 attacked prompts: from 50 items on
the forest uses 3 folds, and from 1,000 prompts half the shuffles.

Everything is seeded (the forest's ``random_state``, the shuffles): the same rows give
the same numbers. Too few items, or a single outcome (every attack changed the answer,
or none did), give a result with a ``note`` saying why and no forest — never an error.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

MIN_ITEMS = 4  # fewer items cannot be split into held-out folds that mean anything
MIN_PER_CLASS = 2  # rows of each outcome
MAX_FOLDS = 5
MANY_ITEMS = 50  # from here on 3 folds: each held-out fold still holds 17 items or more
MANY_ROWS = 1000  # from here on half the shuffles: each shuffles 200+ held-out rows


@dataclass(frozen=True)
class Importance:
    feature: str
    mean: float  # held-out accuracy lost when the feature is shuffled
    std: float
    impurity: float  # the forests' mean decrease in impurity (mean over the folds)

    def to_dict(self) -> dict[str, Any]:
        return {
            "feature": self.feature,
            "permutation_importance": self.mean,
            "permutation_std": self.std,
            "impurity_importance": self.impurity,
        }


@dataclass(frozen=True)
class ForestResult:
    """A random forest's held-out accuracy and importances (``note`` when it was not fit)."""

    features: tuple[str, ...]
    rows: int
    items: int
    changed: int
    folds: int = 0
    accuracy: float = float("nan")
    baseline: float = float("nan")
    importances: tuple[Importance, ...] = ()
    trees: int = 0
    repeats: int = 0
    seed: int = 0
    note: str = ""

    @property
    def fitted(self) -> bool:
        return bool(self.importances)

    @property
    def beats_baseline(self) -> bool:
        return self.fitted and self.accuracy > self.baseline

    def ranked(self) -> list[Importance]:
        """Importances, most important first (ties in the features' order)."""
        return sorted(self.importances, key=lambda i: -i.mean)

    def to_dict(self) -> dict[str, Any]:
        return {
            "rows": self.rows,
            "items": self.items,
            "changed": self.changed,
            "folds": self.folds,
            "accuracy": self.accuracy,
            "baseline": self.baseline,
            "beats_baseline": self.beats_baseline,
            "trees": self.trees,
            "repeats": self.repeats,
            "seed": self.seed,
            "note": self.note or None,
            "importances": [i.to_dict() for i in self.ranked()],
        }


def _not_fit(features: Sequence[str], rows: int, items: int, changed: int, note: str) -> ForestResult:
    return ForestResult(tuple(features), rows, items, changed, note=note)


def forest_importances(
    X: np.ndarray,
    y: Sequence[bool],
    groups: Sequence[Any],
    features: Sequence[str],
    *,
    seed: int = 0,
    trees: int = 100,
    repeats: int = 10,
) -> ForestResult:
    """Fit a random forest predicting ``y`` from ``X`` and measure it (see the module
    docstring).

    Parameters
    ----------
    X : array (rows, features)
    y : bools, one per row (True: the answer changed)
    groups : one hashable per row (the item); rows of a group are held out together
    features : the column names
    seed, trees, repeats : the forest's seed and size, the shuffles per feature
    """
    X = np.asarray(X, dtype=float)
    labels = np.asarray(y, dtype=bool)
    n = len(labels)
    if X.shape != (n, len(features)) or len(groups) != n:
        raise ValueError(
            f"X must be (rows, features) = ({n}, {len(features)}) with one group per "
            f"row; got X {X.shape} and {len(groups)} groups."
        )
    codes = {g: i for i, g in enumerate(dict.fromkeys(groups))}
    g = np.array([codes[x] for x in groups], dtype=int)
    items, changed = len(codes), int(labels.sum())
    if n == 0:
        return _not_fit(features, 0, 0, 0, "No attack changed a word: nothing to learn from.")
    if changed == 0 or changed == n:
        what = "changed the answer" if changed else "left the answer as it was"
        return _not_fit(
            features,
            n,
            items,
            changed,
            f"Every one of the {n} attacks {what}: with one outcome there is nothing "
            "for a forest to tell apart, so no importances.",
        )
    if items < MIN_ITEMS or min(changed, n - changed) < MIN_PER_CLASS:
        return _not_fit(
            features,
            n,
            items,
            changed,
            f"Too few to judge a forest: {items} items, {changed} of {n} attacks "
            f"changed the answer; at least {MIN_ITEMS} items and {MIN_PER_CLASS} "
            "attacks of each outcome are needed. Use more items.",
        )
    try:
        from sklearn.ensemble import RandomForestClassifier
        from sklearn.model_selection import GroupKFold
    except ImportError:
        return _not_fit(
            features,
            n,
            items,
            changed,
            "scikit-learn is not installed (the `battery` extra: `dbpa setup battery`): no forest.",
        )

    # bounded cost on large batteries (a forest costs about a millisecond of CPU per tree)
    folds = min(MAX_FOLDS, items) if items < MANY_ITEMS else 3
    repeats = repeats if n < MANY_ROWS else max(1, repeats // 2)
    rng = np.random.default_rng(seed)
    pred = np.zeros(n, dtype=bool)
    base = np.zeros(n, dtype=bool)
    k = len(features)
    shuffled_right = np.zeros((k, repeats))  # rows predicted right with feature j shuffled
    impurity = np.zeros(k)
    for train, test in GroupKFold(n_splits=folds).split(X, labels, g):
        model = RandomForestClassifier(n_estimators=trees, random_state=seed, n_jobs=1)
        model.fit(X[train], labels[train])
        impurity += model.feature_importances_ / folds
        pred[test] = model.predict(X[test])
        base[test] = labels[train].mean() > 0.5  # ties: "unchanged"
        # every shuffled copy of the held-out rows in one prediction
        copies = []
        for j in range(k):
            for _ in range(repeats):
                Xs = X[test].copy()
                Xs[:, j] = rng.permutation(Xs[:, j])
                copies.append(Xs)
        got = model.predict(np.vstack(copies)).reshape(k, repeats, len(test))
        shuffled_right += (got == labels[test]).sum(axis=2)
    accuracy = float((pred == labels).mean())
    drops = accuracy - shuffled_right / n
    imps = tuple(
        Importance(f, float(drops[j].mean()), float(drops[j].std()), float(impurity[j]))
        for j, f in enumerate(features)
    )
    baseline = float((base == labels).mean())
    note = (
        ""
        if accuracy > baseline
        else (
            f"The forest predicts held-out items no better than always guessing the more frequent "
            f"outcome ({accuracy:.2f} vs {baseline:.2f}): these importances say little."
        )
    )
    return ForestResult(
        tuple(features), n, items, changed, folds, accuracy, baseline, imps, trees, repeats, seed, note
    )


__all__ = [
    "MANY_ITEMS",
    "MANY_ROWS",
    "MAX_FOLDS",
    "MIN_ITEMS",
    "MIN_PER_CLASS",
    "ForestResult",
    "Importance",
    "forest_importances",
]
