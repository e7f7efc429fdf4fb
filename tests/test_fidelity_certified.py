"""Every reported pseudo-discrepancy is exact or a certified bound on the safe side, up to
20 options: worst cases never below the sup, best cases (the band's lower edge) never above
the inf, comparisons never below the sup; checked against brute force (a fine grid of the
3-option simplex, exhaustive vertex enumeration, many points of the ball) and the outputs
say "exact" or "bound"."""

import numpy as np
import pytest

from dbpa_core.fidelity import discrepancy as dz
from dbpa_core.fidelity import from_arrays, run_fidelity
from dbpa_core.fidelity.sets import kl_ball_support, kl_divergence

from .test_fidelity_sets import ball_points, simplex_grid

GRID = simplex_grid(600)


def _cases(d, m, seed):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(d), m)
    p[0, 0] = 0.0  # an option nobody chose
    p[0] /= p[0].sum()
    q = rng.dirichlet(np.ones(d), m)
    q[-1] = 0.9 * p[-1] + 0.1 / d  # a simulator close to the real answers
    r = rng.uniform(0.005, 0.1, m)
    values = np.sort(rng.normal(size=d))
    return p, r, q, values


def _ball(p, r, rng, k=300):
    """Points of the ball: boundary points for random directions, and mixtures with p."""
    d = p.size
    w = rng.normal(size=(k, d)) * rng.choice([0.3, 1.0, 5.0], size=(k, 1))
    _, u = kl_ball_support(np.repeat(p[None], k, 0), w, np.full(k, r))
    u = np.vstack([u, 0.5 * (u + p), p[None]])
    assert kl_divergence(np.broadcast_to(p, u.shape), u).max() <= r + 1e-9
    return u


@pytest.mark.parametrize("loss", ["kl", "w1"])
def test_best_case_against_the_grid(loss):
    """3 options: the certified lower edge is below every grid point of the ball and within
    the grid's resolution of its least value; the gap closes."""
    p, r, q, values = _cases(3, 10, 1)
    if loss == "kl":
        lo, up, _ = dz.kl_lower_bound(p, r, q)
    else:
        lo, up, _ = dz.w1_lower_bound(p, r, q, values)
    assert np.all(up >= lo) and np.max(up - lo) < 1e-6
    for j in range(len(p)):
        u = ball_points(p[j], r[j], GRID)
        vals = dz.categorical_loss(u, np.broadcast_to(q[j], u.shape), loss, values)
        assert lo[j] <= vals.min() + 1e-12, j
        assert lo[j] >= vals.min() - 0.01, j


@pytest.mark.parametrize("d", [5, 10, 15, 20])
@pytest.mark.parametrize("loss", ["kl", "w1", "tv"])
def test_best_case_never_above_a_point_of_the_ball(loss, d):
    rng = np.random.default_rng(d)
    p, r, q, values = _cases(d, 6, 100 + d)
    if loss == "kl":
        lo, up, point = dz.kl_lower_bound(p, r, q)
    elif loss == "w1":
        lo, up, point = dz.w1_lower_bound(p, r, q, values)
    else:
        lo, up, point = dz.tv_lower(p, r, q, return_bracket=True)
    # the upper end is reached at a point of the set
    assert np.all(kl_divergence(p, point) <= r * (1 + 1e-9) + 1e-12)
    at_point = dz.categorical_loss(point, q, loss, values)
    assert np.all(at_point <= up + 1e-9)
    assert np.all(lo <= up) and np.max(up - lo) < 1e-3
    ref = dz.minimize_convex(p, r, q, loss, values=values)  # SLSQP: a reference only
    assert np.all(lo <= ref + 1e-7)
    for j in range(len(p)):
        u = _ball(p[j], r[j], rng)
        vals = dz.categorical_loss(u, np.broadcast_to(q[j], u.shape), loss, values)
        assert lo[j] <= vals.min() + 1e-12, (loss, d, j)


def _vertex_sup(p, r, q, verts):
    """Brute force: ``sup_C max_f f·(u - q)`` over every vertex f, each support value at
    the ball's maximizer (the exact sup up to rounding, from points of the ball)."""
    k = len(verts)
    out = []
    for j in range(len(p)):
        _, u = kl_ball_support(np.repeat(p[j : j + 1], k, 0), verts, np.full(k, r[j]))
        out.append(float(((verts * u).sum(1) - verts @ q[j]).max()))
    return np.array(out)


@pytest.mark.parametrize(
    "d,m",
    # 20 options: every vertex of the ball enumerated (40 s on 2 busy cores)
    [(12, 2), (16, 2), pytest.param(20, 1, marks=pytest.mark.slow)],
)
def test_w1_worst_case_bound_against_every_vertex(d, m):
    """Beyond 11 options the W1 worst case is a certified bound: never below the exhaustive
    maximum over the 2^(d-1) Lipschitz vertices, and its lower end (a point of the ball)
    never above it."""
    p, r, q, values = _cases(d, m, 200 + d)
    up, lo = dz.w1_upper_bound(p, r, q, values)
    exact = _vertex_sup(p, r, q, dz.w1_vertices(values))
    assert np.all(up >= exact - 1e-9)
    assert np.all(lo <= exact + 1e-9)


@pytest.mark.parametrize("d,m", [(15, 3), (20, 1)])
def test_tv_worst_case_bound_against_every_subset(d, m):
    p, r, q, _ = _cases(d, m, 300 + d)
    up, lo = dz.tv_upper_bound(p, r, q)
    exact = dz.tv_upper_exact_rows(p, r, q)
    assert np.all(up >= exact - 1e-9) and np.all(lo <= exact + 1e-9)


def _data(d, m, seed, loss):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(d), m)
    real = np.array([rng.multinomial(400, x) for x in p], dtype=float)
    sims = {
        "close": np.array([rng.multinomial(300, 0.8 * x + 0.2 / d) for x in p], dtype=float),
        "far": np.array([rng.multinomial(300, rng.dirichlet(np.ones(d))) for _ in p], dtype=float),
    }
    sims = {k: v + 0.5 for k, v in sims.items()} if loss == "kl" else sims
    # default option labels: their values are evenly spaced on [-1, 1] (w1)
    return from_arrays(real, sims), p


@pytest.mark.filterwarnings("ignore::UserWarning")
@pytest.mark.parametrize("loss,d", [("w1", 12), ("w1", 20), ("tv", 16), ("kl", 12), ("w1", 5)])
def test_analysis_marks_every_value_and_keeps_the_safe_side(loss, d):
    data, _ = _data(d, 12, d, loss)
    res = run_fidelity(data, loss=loss, band=True, baseline="exact")
    rng = np.random.default_rng(0)
    for s in res.simulators:
        assert s.lower_method in ("exact", "bound")
        assert s.to_dict(list(data.ids), 0.5)["best_case"]["method"] == s.lower_method
        assert s.method in ("exact", "bound")
    p = np.vstack(data.real_probabilities())
    for c in res.comparisons:
        assert c.method == ("exact" if loss == "kl" else c.method)
        d_c = c.to_dict()
        assert d_c["method"] in ("exact", "bound")
        if not c.exact:
            assert c.gap is not None and np.all(c.gap >= 0) and c.largest_gap is not None
        qa = np.vstack(data.probabilities(c.first)) if c.first != "uniform" else np.full_like(p, 1 / d)
        qb = np.vstack(data.probabilities(c.second)) if c.second != "uniform" else np.full_like(p, 1 / d)
        vals = np.linspace(-1.0, 1.0, d) if loss == "w1" else None
        for j in range(data.m):
            u = _ball(p[j], res.radius[j], rng, k=60)
            diff = dz.categorical_loss(u, np.broadcast_to(qa[j], u.shape), loss, vals) - dz.categorical_loss(
                u, np.broadcast_to(qb[j], u.shape), loss, vals
            )
            assert c.deltas[j] >= diff.max() - 1e-9, (c.first, c.second, j)
    for s in res.simulators:
        q = np.vstack(data.probabilities(s.name)) if s.name != "uniform" else np.full_like(p, 1 / d)
        vals = np.linspace(-1.0, 1.0, d) if loss == "w1" else None
        for j in range(data.m):
            u = _ball(p[j], res.radius[j], rng, k=60)
            v = dz.categorical_loss(u, np.broadcast_to(q[j], u.shape), loss, vals)
            assert s.upper[j] >= v.max() - 1e-9 and s.lower[j] <= v.min() + 1e-12
    text = res.summary_text()
    assert "best case" in text and "worst case" in text


def test_kl_best_case_stays_tight_and_safe_for_tiny_radii_and_rare_options():
    """Tiny radii need a large multiplier (ν about -λ): the dual is still tight there, and
    its rounding is kept below the exact value (points of the ball never go below it)."""
    rng = np.random.default_rng(5)
    m, d = 40, 2
    p = rng.dirichlet(np.full(d, 0.3), m)
    q = np.maximum(rng.dirichlet(np.full(d, 0.3), m), 1e-9)
    q /= q.sum(axis=1, keepdims=True)
    r = 10 ** rng.uniform(-6, 0.7, m)
    lo, up, _ = dz.kl_lower_bound(p, r, q)
    assert np.all(np.isfinite(lo)) and np.all(lo <= up) and np.max(up - lo) < 1e-6
    for j in range(m):
        u = _ball(p[j], r[j], rng, k=200)
        u = u[kl_divergence(np.broadcast_to(p[j], u.shape), u) <= r[j]]
        assert lo[j] <= dz.categorical_loss(u, np.broadcast_to(q[j], u.shape), "kl").min(), j
