"""Pseudo-discrepancies: every closed form and every solver against brute force (a fine
grid of the 3-option simplex, random search in the ball for 5 options), the general
solver against the closed forms, W1 on real values against scipy, and invariants."""

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st
from scipy.stats import wasserstein_distance

from dbpa_core.fidelity import discrepancy as dz
from dbpa_core.fidelity.sets import kl_ball_support, kl_divergence

from .test_fidelity_sets import ball_points, simplex_grid

GRID = simplex_grid(800)
STEP = 1 / 800
VALUES = np.array([-1.0, 0.3, 1.0])


def cases(seed, m=14):
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.full(3, 1.5), m)
    p[0] = [0.5, 0.5, 0.0]  # an option nobody chose
    p[1] = [1.0, 0.0, 0.0]  # everyone chose the same
    r = rng.uniform(0.005, 0.12, m)
    q = rng.dirichlet(np.full(3, 1.5), m)
    q[2] = p[2]  # a simulator that is exactly right
    a = rng.dirichlet(np.full(3, 2.0), m)
    b = rng.dirichlet(np.full(3, 2.0), m)
    b[3] = a[3]  # two identical simulators
    return p, r, q, a, b


def brute(p, r, loss, q):
    u = ball_points(p, r, GRID)
    return dz.categorical_loss(u, np.broadcast_to(q, u.shape), loss, VALUES)


# the loss changes by at most this much between neighbouring grid points
TOL = {"tv": 1.5 * STEP, "w1": 2 * 2 * STEP, "kl": 0.004}


@pytest.mark.parametrize("loss", ["tv", "w1"])
def test_closed_form_upper_against_the_grid(loss):
    p, r, q, *_ = cases(10)
    got = dz.tv_upper(p, r, q) if loss == "tv" else dz.w1_upper(p, r, q, VALUES)
    for j in range(len(p)):
        vals = brute(p[j], r[j], loss, q[j])
        assert got[j] >= vals.max() - 1e-9, j  # never below a point of the ball
        assert got[j] <= vals.max() + TOL[loss], j  # and reached by the grid


def test_tv_lower_against_the_grid_and_the_general_solver():
    p, r, q, *_ = cases(11)
    got = dz.tv_lower(p, r, q)
    solver = dz.minimize_convex(p, r, q, "tv")
    for j in range(len(p)):
        vals = brute(p[j], r[j], "tv", q[j])
        assert got[j] <= vals.min() + 1e-9, j
        assert got[j] >= vals.min() - TOL["tv"], j
    assert got == pytest.approx(solver, abs=1e-6)
    assert got[2] == 0.0  # q inside the ball


def test_kl_upper_lower_and_pairwise_against_the_grid():
    p, r, _, a, b = cases(12)
    up, _ = dz.maximize_convex(p, r, a, "kl")
    lo = dz.minimize_convex(p, r, a, "kl")
    pair = dz.kl_pairwise(p, r, a, b)
    for j in range(len(p)):
        vals = brute(p[j], r[j], "kl", a[j])
        diff = vals - brute(p[j], r[j], "kl", b[j])
        assert vals.max() - 1e-9 <= up[j] <= vals.max() + TOL["kl"], j
        assert vals.min() - TOL["kl"] <= lo[j] <= vals.min() + 1e-6, j
        assert diff.max() - 1e-9 <= pair[j] <= diff.max() + TOL["kl"], j


def test_w1_lower_against_the_grid():
    p, r, q, *_ = cases(13)
    lo = dz.minimize_convex(p, r, q, "w1", values=VALUES)
    for j in range(len(p)):
        vals = brute(p[j], r[j], "w1", q[j])
        assert vals.min() - TOL["w1"] <= lo[j] <= vals.min() + 1e-6, j


@pytest.mark.parametrize("loss", ["tv", "w1"])
def test_pairwise_bound_is_valid_and_tight(loss):
    """The tv / w1 pairwise δ̂ is an upper bound of the sup (never below a point of the
    ball) that is close to it; identical simulators give exactly 0."""
    p, r, _, a, b = cases(14, m=24)
    got = dz.tv_pairwise(p, r, a, b) if loss == "tv" else dz.w1_pairwise(p, r, a, b, VALUES)
    gaps = []
    for j in range(len(p)):
        diff = brute(p[j], r[j], loss, a[j]) - brute(p[j], r[j], loss, b[j])
        assert got[j] >= diff.max() - 1e-9, j
        gaps.append(got[j] - diff.max())
    assert np.mean(gaps) < 0.005 and np.max(gaps) < 0.04
    assert got[3] == pytest.approx(0.0, abs=1e-12)


def test_five_options_against_random_search_and_the_general_solver():
    rng = np.random.default_rng(15)
    m, d = 12, 5
    p = rng.dirichlet(np.ones(d), m)
    r = rng.uniform(0.01, 0.1, m)
    q = rng.dirichlet(np.ones(d), m)
    closed = dz.tv_upper(p, r, q)
    general, _ = dz.maximize_convex(p, r, q, "tv")
    assert general == pytest.approx(closed, abs=1e-6)  # the solver reaches the closed form
    lower = dz.tv_lower(p, r, q)
    assert lower == pytest.approx(dz.minimize_convex(p, r, q, "tv"), abs=1e-6)
    for j in range(m):
        # random points of the ball: boundary points for random directions, inner mixtures
        w = rng.normal(size=(400, d))
        _, u = kl_ball_support(np.repeat(p[j : j + 1], 400, 0), w, np.full(400, r[j]))
        u = np.vstack([u, 0.5 * (u + p[j])])
        assert kl_divergence(np.broadcast_to(p[j], u.shape), u).max() <= r[j] + 1e-9
        tv = 0.5 * np.abs(u - q[j]).sum(axis=1)
        assert closed[j] >= tv.max() - 1e-9
        assert lower[j] <= tv.min() + 1e-9


@pytest.mark.parametrize("loss", ["squared", "absolute", "kl"])
def test_interval_closed_forms_against_a_grid(loss):
    rng = np.random.default_rng(16)
    for _ in range(30):
        lo, hi = np.sort(rng.uniform(0.01, 0.99, 2))
        q, a, b = rng.uniform(0.01, 0.99, 3)
        u = np.linspace(lo, hi, 20001)
        vals = dz.scalar_loss(u, q, loss)
        diff = dz.scalar_loss(u, a, loss) - dz.scalar_loss(u, b, loss)
        assert float(dz.interval_upper(lo, hi, q, loss)) == pytest.approx(vals.max(), abs=1e-12)
        low = float(dz.interval_lower(lo, hi, q, loss))
        assert vals.min() - 1e-4 <= low <= vals.min() + 1e-12  # the grid steps 5e-5
        assert float(dz.interval_pairwise(lo, hi, a, b, loss)) == pytest.approx(diff.max(), abs=1e-12)


def test_w1_on_real_values_against_scipy_and_integration():
    rng = np.random.default_rng(17)
    for _ in range(10):
        x, y = rng.normal(0, 1, 37), rng.normal(0.4, 2, 23)
        assert dz.w1_distance(x, y) == pytest.approx(wasserstein_distance(x, y), abs=1e-12)
        x = np.clip(rng.normal(5, 2, 41), 0, 10)
        t = np.linspace(-1, 11, 1_200_001)
        fx = np.searchsorted(np.sort(x), t, side="right") / x.size
        fu = np.clip(t / 10, 0, 1)
        numeric = np.sum(np.abs(fx - fu)) * (t[1] - t[0])
        assert dz.w1_to_uniform(x, 0.0, 10.0) == pytest.approx(numeric, abs=1e-4)


def test_w1_ball_closed_forms():
    d, r = np.array([0.3, 1.0, 0.05]), np.array([0.1, 0.2, 0.1])
    assert dz.w1ball_upper(d, r) == pytest.approx([0.4, 1.2, 0.15])
    assert dz.w1ball_lower(d, r) == pytest.approx([0.2, 0.8, 0.0])
    assert dz.w1ball_pairwise([0.3], [0.5], [0.25], [0.2]) == pytest.approx([0.2])
    assert dz.w1ball_pairwise([0.3], [0.2], [0.05], [0.2]) == pytest.approx([0.05])


@given(st.integers(0, 2**31), st.integers(2, 6), st.floats(0.001, 0.5))
@settings(max_examples=60, deadline=None)
def test_lower_plugin_upper_are_ordered(seed, d, r):
    """Δ⁻ <= L(p̂, q) <= Δ̂ (p̂ is in its own ball), Δ̂ >= 0, and δ̂ >= L(p̂, a) - L(p̂, b)."""
    rng = np.random.default_rng(seed)
    p = rng.dirichlet(np.ones(d), 3)
    q = rng.dirichlet(np.ones(d), 3)
    a = rng.dirichlet(np.ones(d), 3)
    rr = np.full(3, r)
    plug = dz.categorical_loss(p, q, "tv")
    up, lo = dz.tv_upper(p, rr, q), dz.tv_lower(p, rr, q)
    assert np.all(lo <= plug + 1e-9) and np.all(plug <= up + 1e-9) and np.all(lo >= 0)
    pair = dz.tv_pairwise(p, rr, a, q)
    assert np.all(pair >= dz.categorical_loss(p, a, "tv") - plug - 1e-9)


def test_unknown_loss():
    with pytest.raises(
        ValueError,
        match=r"`loss` must be one of tv, kl, w1, squared, absolute; "
        r"got 'hellinger'",
    ):
        dz.check_loss("hellinger")


def test_too_many_options_for_the_pairwise_bound():
    p = np.full((2, 11), 1 / 11)
    with pytest.raises(ValueError, match="tv comparisons over 11 options"):
        dz.tv_pairwise(p, np.full(2, 0.01), p, p)


def test_w1_ball_closed_forms_against_points_of_the_ball():
    """Δ̂ = W1(P̂, Q̂) + r and Δ⁻ = max(W1 - r, 0): no distribution in the ball goes beyond
    them (random weighted perturbations of P̂), the mixture of P̂ and Q̂ reaches the lower
    one, and moving a little mass far away approaches the upper one."""
    rng = np.random.default_rng(18)
    for _ in range(5):
        x, y = rng.normal(0, 1, 30), rng.normal(0.8, 1.5, 25)
        d = wasserstein_distance(x, y)
        r = rng.uniform(0.05, 0.5) * d
        support = np.concatenate([x, y])
        best_lo, best_hi, inside = np.inf, -np.inf, 0
        for _ in range(300):  # random points of the ball
            share = rng.uniform(0, 1.5 * r / d)  # a little of Q̂, and P̂ reweighted
            wts = np.concatenate(
                [(1 - share) * rng.dirichlet(np.full(30, 200.0)), share * rng.dirichlet(np.ones(25))]
            )
            if wasserstein_distance(x, support, v_weights=wts) <= r:
                inside += 1
                v = wasserstein_distance(support, y, u_weights=wts)
                best_lo, best_hi = min(best_lo, v), max(best_hi, v)
        assert inside >= 30
        assert dz.w1ball_lower(d, r) - 1e-9 <= best_lo and best_hi <= dz.w1ball_upper(d, r) + 1e-9
        t = r / d  # the mixture reaches the lower value
        mix = np.concatenate([np.full(30, (1 - t) / 30), np.full(25, t / 25)])
        assert wasserstein_distance(x, support, v_weights=mix) == pytest.approx(r)
        assert wasserstein_distance(support, y, u_weights=mix) == pytest.approx(float(dz.w1ball_lower(d, r)))
        eps = 1e-4  # a little mass far away nears the upper value
        far = np.append(x, x.max() + y.max() + r / eps)
        wts = np.append(np.full(30, (1 - eps) / 30), eps)
        assert wasserstein_distance(x, far, v_weights=wts) <= r * 1.01
        assert wasserstein_distance(far, y, u_weights=wts) >= 0.97 * float(dz.w1ball_upper(d, r))


# --------------------------------------------------------------------------- exact tv worst case


def _hi_brentq(a, r):
    """The largest x with binary KL(a ‖ x) <= r, by scipy's brentq (an independent root
    finder): the exact sup of u(S) over the ball for a subset S with p̂(S) = a."""
    from scipy.optimize import brentq

    def kl(x):
        t = a * np.log(a / x) if a > 0 else 0.0
        return t + ((1 - a) * np.log((1 - a) / (1 - x)) if a < 1 else 0.0) - r

    if a >= 1.0 or kl(1 - 1e-15) <= 0:
        return 1.0
    return brentq(kl, a, 1 - 1e-15, xtol=1e-15, rtol=1e-15)


def tv_brute(p, r, q):
    """``max over non-empty proper S of hi(p̂(S), r) - q(S)`` (and 0), by enumeration;
    with each S's maximizer u (p̂ scaled up inside S, down outside), checked to be in the
    ball, so the value is also reached by a point of the set."""
    d = len(p)
    best, best_u = 0.0, p.copy()
    for mask in range(1, 2**d - 1):
        s = np.array([(mask >> i) & 1 for i in range(d)], dtype=bool)
        a = float(p[s].sum())
        hi = _hi_brentq(a, r)
        v = hi - float(q[s].sum())
        if v > best:
            u = np.where(s, p * hi / a if a > 0 else 0.0, p * (1 - hi) / (1 - a) if a < 1 else 0.0)
            if a == 0:
                u[s] = hi / s.sum()
            best, best_u = v, u
    return best, best_u


def test_tv_upper_has_no_floor():
    """Twenty of twenty real answers "yes" against a simulator at 97/3: the exact worst
    case is 0.0370, not 1 - e^{-r} = 0.0670 (the empty subset's former floor)."""
    from dbpa_core.fidelity.sets import kl_radius_categorical

    r = np.atleast_1d(kl_radius_categorical(20, 2))
    got = dz.tv_upper(np.array([[1.0, 0.0]]), r, np.array([[0.97, 0.03]]))
    assert got[0] == pytest.approx(0.0370, abs=5e-5)
    assert got[0] < 1 - np.exp(-r[0]) - 0.02
    assert got[0] == pytest.approx(tv_brute(np.array([1.0, 0.0]), r[0], np.array([0.97, 0.03]))[0], abs=1e-12)
    # a simulator equal to the real answers of a large sample: close to 0, not 1 - e^{-r}
    p = np.array([[0.2, 0.3, 0.5]])
    assert dz.tv_upper(p, np.array([1e-5]), p)[0] < 0.005


@given(
    st.integers(0, 2**31),
    st.integers(2, 7),
    st.integers(1, 40),
    st.sampled_from(["dirichlet", "one option", "concentrated"]),
)
@settings(max_examples=120, deadline=None)
def test_tv_upper_equals_the_subset_brute_force(seed, d, n, shape):
    """For every n >= 1, concentrated and all-in-one-option real answers included, the tv
    worst case equals the brute force over option subsets (to 1e-12), is never below it,
    and the brute force's maximizer is a point of the ball that reaches it."""
    from dbpa_core.fidelity.sets import kl_radius_categorical

    rng = np.random.default_rng(seed)
    probs = {
        "dirichlet": rng.dirichlet(np.ones(d)),
        "one option": np.eye(d)[rng.integers(d)],
        "concentrated": rng.dirichlet(np.full(d, 0.1)),
    }[shape]
    counts = rng.multinomial(n, probs).astype(float)
    p = counts / n
    r = float(kl_radius_categorical(n, d))
    q = rng.dirichlet(np.full(d, rng.choice([0.2, 1.0, 5.0])))
    got = float(dz.tv_upper(p[None], np.array([r]), q[None])[0])
    want, u = tv_brute(p, r, q)
    assert got >= want - 1e-13
    assert got == pytest.approx(want, abs=1e-12)
    assert kl_divergence(p[None], u[None])[0] <= r * (1 + 1e-6) + 1e-9  # brentq rounding
    assert 0.5 * np.abs(u - q).sum() == pytest.approx(want, abs=1e-9)


# --------------------------------------------------------------------------- never below the sup


def _tv_enumerated(p, r, q):
    """The exact tv worst case by enumerating every non-empty subset (2^d - 1 of them)."""
    from dbpa_core.fidelity._kernels import kl_upper_end

    d = len(p)
    masks = ((np.arange(1, 2**d)[:, None] >> np.arange(d)) & 1).astype(bool)
    a = np.clip(masks @ p, 0, 1)
    hi = kl_upper_end(a, np.full(a.shape, r), masks.any(1), ~masks.all(1))
    return max(float((hi - masks @ q).max()), 0.0)


@given(st.integers(0, 2**31), st.integers(15, 20), st.integers(1, 400))
@settings(max_examples=12, deadline=None)
def test_tv_bound_for_many_options_is_never_below_the_brute_force(seed, d, n):
    """Above 14 options the tv worst case is the relaxation bound: never below the exact
    value (every subset enumerated, up to 20 options), its lower end never above it."""
    from dbpa_core.fidelity.sets import kl_radius_categorical

    rng = np.random.default_rng(seed)
    p = rng.multinomial(n, rng.dirichlet(np.full(d, rng.choice([0.2, 1.0])))) / n
    q = rng.dirichlet(np.full(d, rng.choice([0.3, 1.0, 3.0])))
    r = float(kl_radius_categorical(n, d))
    up, lo = dz.tv_upper_bound(p[None], np.array([r]), q[None])
    exact = _tv_enumerated(p, r, q)
    assert up[0] >= exact - 1e-12 and lo[0] <= exact + 1e-12


def test_tv_bound_matches_the_closed_form_where_both_run():
    rng = np.random.default_rng(21)
    from dbpa_core.fidelity.sets import kl_radius_categorical

    for d in (5, 9, 14):
        n = rng.integers(1, 600, 200)
        p = np.vstack([rng.multinomial(k, rng.dirichlet(np.ones(d))) / k for k in n])
        q = rng.dirichlet(np.ones(d), 200)
        r = kl_radius_categorical(n, d)
        exact = dz.tv_upper(p, r, q)
        up, lo = dz.tv_upper_bound(p, r, q)
        assert np.all(up >= exact - 1e-12) and np.all(lo <= exact + 1e-12)
        assert np.mean(np.abs(lo - exact) < 1e-12) > 0.9  # a threshold set is usually optimal
        assert np.mean(up - exact) < 0.01


@pytest.mark.parametrize("d", [12, 14])
def test_w1_bound_for_many_options_against_vertex_enumeration(d):
    """Above 11 options the w1 worst case is a certified bound: never below the exact value
    (every vertex of the Lipschitz polytope enumerated), and the general solver's point
    below it."""
    from dbpa_core.fidelity.sets import kl_radius_categorical

    rng = np.random.default_rng(d)
    values = np.sort(rng.uniform(-1, 1, d))
    n = rng.integers(5, 300, 3)
    p = np.vstack([rng.multinomial(k, rng.dirichlet(np.ones(d))) / k for k in n])
    q = rng.dirichlet(np.ones(d), 3)
    r = kl_radius_categorical(n, d)
    exact = dz.w1_upper(p, r, q, values)
    up, lo = dz.w1_upper_bound(p, r, q, values)
    assert np.all(up >= exact - 1e-9) and np.all(lo <= exact + 1e-9)


@given(st.integers(0, 2**31), st.integers(2, 6), st.integers(5, 500))
@settings(max_examples=15, deadline=None)
def test_kl_upper_is_certified_against_points_of_the_ball(seed, d, n):
    """The kl worst case (a dual bound) is never below any point of the ball (its boundary
    in 300 random directions, and the general solver's point), and close to the best."""
    from dbpa_core.fidelity.sets import kl_radius_categorical

    rng = np.random.default_rng(seed)
    p = rng.multinomial(n, rng.dirichlet(np.ones(d))) / n
    q = rng.dirichlet(np.full(d, 2.0))
    r = float(kl_radius_categorical(n, d))
    up, lo = dz.kl_upper_bound(p[None], np.array([r]), q[None])
    w = rng.normal(size=(300, d)) * 5
    _, u = kl_ball_support(np.repeat(p[None], 300, 0), w, np.full(300, r))
    pts = dz.categorical_loss(u, np.broadcast_to(q, u.shape), "kl")
    assert up[0] >= max(pts.max(), lo[0]) - 1e-9
    # the double dual has a true duality gap on a few questions: the worst found is 5 % of
    # the value (n = 9 answers in 2 of 6 options: 2.29 for a sup of 2.18); usually 1e-9
    assert up[0] - lo[0] <= 0.06 * max(lo[0], 0.05)


def test_outputs_say_exact_or_bound_per_simulator():
    """tv with 5 options is exact; with 16 options (no enumeration) a bound with its gap;
    kl is a bound; fidelity.json and the summary say which."""
    import warnings

    from dbpa_core.fidelity import from_arrays, run_fidelity

    rng = np.random.default_rng(5)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        five = run_fidelity(
            from_arrays(
                rng.multinomial(200, np.ones(5) / 5, 6), {"s": rng.multinomial(50, np.ones(5) / 5, 6) + 1}
            ),
            band=False,
        )
        many = run_fidelity(
            from_arrays(
                rng.multinomial(60, np.ones(16) / 16, 6), {"s": rng.multinomial(50, np.ones(16) / 16, 6) + 1}
            ),
            band=False,
        )
    assert all(s.method == "exact" for s in five.simulators)
    assert five.summary_text().splitlines()[4].endswith("exact")
    s = many.simulator("s")
    assert s.gap is not None and np.all(s.gap >= 0)
    assert s.to_dict(list(many.data.ids), 0.5)["worst_case"]["method"] == s.method
    assert s.method_text == "exact" if s.method == "exact" else s.method_text.startswith("bound")


def test_the_compiled_kernels_agree_with_numpy(monkeypatch):
    """Large analyses use the compiled three-cell support function and binary-KL ends:
    they agree with the numpy dual search (and are never below its point of the ball), and
    an analysis gives the same numbers either way."""
    import warnings

    from dbpa_core.fidelity import run_fidelity, sample_data
    from dbpa_core.fidelity._kernels import kl_upper_end, support3
    from dbpa_core.fidelity.sets import binary_kl_upper

    rng = np.random.default_rng(9)
    n = 20000
    p = rng.dirichlet(np.full(3, 0.5), n)
    p[:500, 0] = 0
    p[500:1000, 2] = 0
    p /= p.sum(axis=1, keepdims=True)
    full = (rng.random((n, 3)) < 0.9) | (p > 0)
    r = np.exp(rng.uniform(-12, 3, n))
    r[:20] = 0.0
    w = np.where(full, np.array([1.0, 0.0, -1.0]), -3.0)
    kernel = support3(p[:, 0], p[:, 1], p[:, 2], full[:, 0], full[:, 1], full[:, 2], r)
    dual, _ = kl_ball_support(p, w, r, value_only=True)
    primal, _ = kl_ball_support(p, w, r)
    np.testing.assert_allclose(kernel, dual, atol=1e-7)
    assert np.all(kernel >= primal - 1e-7)
    a = rng.random(n)
    a[:50], a[50:100] = 0.0, 1.0
    np.testing.assert_allclose(kl_upper_end(a, r), binary_kl_upper(a, r, outer=True), atol=1e-12)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        plain = run_fidelity(sample_data())
        monkeypatch.setattr(dz, "KERNEL_FROM", 0)
        compiled = run_fidelity(sample_data())
    for s, t in zip(plain.simulators, compiled.simulators, strict=True):
        np.testing.assert_allclose(s.upper, t.upper, atol=1e-9)
    for c, e in zip(plain.comparisons, compiled.comparisons, strict=True):
        np.testing.assert_allclose(c.deltas, e.deltas, atol=1e-7)


@pytest.mark.parametrize("d", [2, 3, 5])
@pytest.mark.parametrize("kernel", [False, True])
def test_tv_table_columns_derived_by_shift_and_scale_equal_direct_solves(monkeypatch, d, kernel):
    """The table solves only the sign patterns that are not a shift or a doubling of a
    {0, 1} pattern and derives the rest (h(v - 1) = h(v) - 1, h(2v - 1) = 2 h(v) - 1): every
    column equals the support function solved directly, with the compiled kernel split
    across threads or with numpy, rows with empty options and zero radii included."""
    import itertools

    from dbpa_core.fidelity import _kernels

    if kernel:
        monkeypatch.setattr(dz, "KERNEL_FROM", 0)
        monkeypatch.setattr(_kernels, "SPLIT_FROM", 7)
    rng = np.random.default_rng(d)
    m = 40
    p = rng.dirichlet(np.full(d, 0.7), m)
    p[:5, 0] = 0.0
    p /= p.sum(axis=1, keepdims=True)
    r = np.exp(rng.uniform(-9, 1, m))
    r[:3] = 0.0
    table = dz.tv_support_table(p, r)
    w = np.array(list(itertools.product((-1.0, 0.0, 1.0), repeat=d)))[:, ::-1]
    codes = ((w + 1.0) @ (3.0 ** np.arange(d))).astype(int)
    k = len(w)
    direct, _ = kl_ball_support(np.repeat(p, k, axis=0), np.tile(w, (m, 1)), np.repeat(r, k), value_only=True)
    want = np.empty((m, k))
    want[:, codes] = direct.reshape(m, k)
    np.testing.assert_allclose(table, want, atol=1e-9)


@pytest.mark.parametrize("d", [8, 10])
def test_tv_pairwise_without_the_table_is_never_below_points_of_the_ball(d):
    """From 8 options the tv pairwise bound enumerates vertices (no table): never below the
    difference at any point of the ball (boundary points in random directions)."""
    rng = np.random.default_rng(d)
    m = 4
    p = rng.dirichlet(np.ones(d), m)
    a, b = rng.dirichlet(np.ones(d), m), rng.dirichlet(np.ones(d), m)
    r = rng.uniform(0.01, 0.2, m)
    got = dz.tv_pairwise(p, r, a, b)
    for j in range(m):
        w = rng.normal(size=(2000, d)) * 3
        _, u = kl_ball_support(np.repeat(p[j : j + 1], 2000, 0), w, np.full(2000, r[j]))
        diff = 0.5 * np.abs(u - a[j]).sum(1) - 0.5 * np.abs(u - b[j]).sum(1)
        assert got[j] >= diff.max() - 1e-9


def test_many_options_are_exact_when_the_loose_rows_can_be_enumerated(monkeypatch):
    """16 options: the rows the bound leaves loose are enumerated (exact, equal to the brute
    force); with no budget for it they stay a certified bound, never below."""
    import warnings

    from dbpa_core.fidelity import from_arrays, run_fidelity
    from dbpa_core.fidelity.sets import kl_radius_categorical

    rng = np.random.default_rng(16)
    real = rng.multinomial(40, rng.dirichlet(np.full(16, 0.5)), 8)
    sim = rng.multinomial(30, np.ones(16) / 16, 8) + 1
    data = from_arrays(real, {"s": sim})
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        exact = run_fidelity(data, band=False, baseline="exact")
        monkeypatch.setattr(dz, "EXACT_BUDGET", 0)
        bound = run_fidelity(data, band=False, baseline="exact")
    p = real / real.sum(1, keepdims=True)
    r = kl_radius_categorical(real.sum(1), 16)
    q = sim / sim.sum(1, keepdims=True)
    brute = np.array([_tv_enumerated(p[j], r[j], q[j]) for j in range(8)])
    np.testing.assert_allclose(exact.simulator("s").upper, brute, atol=1e-12)
    assert exact.simulator("s").method == "exact"
    assert np.all(bound.simulator("s").upper >= brute - 1e-12)


def test_tv_upper_bound_refuses_a_grid_it_cannot_hold():
    """`tangents` is bounded before any work: 10**9 tangents would hold rows x options x 10**9
    floats at once (the bound's memory), 0 gives no bound at all."""
    p = np.array([[0.5, 0.3, 0.2]])
    q = np.array([[0.2, 0.3, 0.5]])
    r = np.array([0.1])
    with pytest.raises(ValueError, match=r"`tangents` must be <= 10_000, got .*held in memory"):
        dz.tv_upper_bound(p, r, q, tangents=10**9)
    with pytest.raises(ValueError, match=r"`tangents` must be >= 1"):
        dz.tv_upper_bound(p, r, q, tangents=0)
    with pytest.raises(TypeError, match="must be an integer"):
        dz.tv_upper_bound(p, r, q, tangents=1.5)
    up, lo = dz.tv_upper_bound(p, r, q, tangents=10_000)  # the bound itself still works
    assert up[0] >= lo[0] >= 0
