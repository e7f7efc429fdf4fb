"""An estimate counts the requests the run itself asks (``RunResult.requests_of``): for an
audit, a suite and a battery, the calls ``dbpa estimate`` / ``--estimate`` announce are the
samples a fake server then delivers to the run, and the estimate has no enumeration of arms
or battery parts of its own (it follows whatever the run interface declares)."""

from __future__ import annotations

import pytest

from dbpa_core import audit as audit_mod
from dbpa_core import runs
from dbpa_core.attacks.battery import run_battery
from dbpa_core.attacks.spec import parse_attack_spec
from dbpa_core.audit import run_audit
from dbpa_core.cache import Cache
from dbpa_core.runs import AuditRun, BatteryRun
from dbpa_core.runs.costs import audit_estimate
from dbpa_core.spec import parse_spec
from dbpa_core.suite import run_suite

from .fake_openai import FakeOpenAI
from .test_attacks_battery import data  # noqa: F401 - `data` is a fixture


@pytest.fixture(autouse=True)
def key_env(monkeypatch):
    monkeypatch.setenv("DBPA_TEST_KEY", "sk-test-0123456789")


@pytest.fixture(scope="module")
def srv():
    with FakeOpenAI(models=("fake-a", "fake-b")) as s:
        yield s


def audit_text(
    srv: FakeOpenAI,
    *,
    cases: str = "",
    prompt: str = "John has these features: age 70",
    compare: bool = False,
) -> str:
    """An audit (perturbations with a same-prompt control), or with ``compare`` a model
    comparison (two models on the base prompt)."""
    model = f'base_url: "{srv.base_url}", api_key_env: DBPA_TEST_KEY, max_retries: 0'
    if compare:
        models = f"""models:
  - {{backend: openai, name: fake-a, {model}}}
  - {{backend: openai, name: fake-b, {model}, temperature: 1.1}}"""
        perts = ""
    else:
        models = f"model: {{backend: openai, name: fake-a, {model}}}"
        perts = f"""perturbations:
  - {{name: same, prompt: "{prompt}", role: control}}
  - {{name: comedian, prefix: "Act as a comedian. ", role: target}}"""
    return f"""
{models}
embedder: {{backend: rouge1}}
samples: 4
permutations: 99
seed: 5
{cases}
base: {{prompt: "{prompt}"}}
{perts}
"""


def delivered_by(srv: FakeOpenAI, run) -> int:
    """The samples the server delivers while ``run()`` runs."""
    srv.wait_idle()
    before = len(srv.delivered)
    run()
    srv.wait_idle()
    return len(srv.delivered) - before


@pytest.mark.parametrize("compare", [False, True], ids=["perturbations", "models"])
def test_an_audits_estimate_is_the_calls_its_run_makes(tmp_path, srv, compare):
    spec = parse_spec(audit_text(srv, prompt=f"Mary is 6{int(compare)}", compare=compare))
    cache = Cache(tmp_path / "c")
    est = runs.estimate(spec, cache=cache)
    reqs = runs.requests(spec)
    assert est["totals"]["calls"] == len(reqs) > 0
    assert sum(r["calls"] for r in est["arms"]) == len(reqs)
    # every model and arm, the same-prompt control's later samples too
    assert len({(r["arm"], r["model"]) for r in est["arms"]}) == len({(r.arm, repr(r.model)) for r in reqs})
    made = delivered_by(srv, lambda: run_audit(spec, cache=cache))
    assert made == est["totals"]["calls"]
    again = runs.estimate(spec, cache=cache)["totals"]
    assert (again["calls"], again["cached"]) == (0, made)  # the run asked exactly what was counted


def test_a_suites_estimate_is_the_calls_its_run_makes(tmp_path, srv):
    cases = "cases: [{id: a, name: Ann}, {id: b, name: Bo}, {id: c, name: Cy}]"
    spec = parse_spec(audit_text(srv, cases=cases, prompt="{name} is 61"))
    cache = Cache(tmp_path / "c")
    est = runs.estimate(spec, cache=cache)
    assert est["cases"] == 3 and est["totals"]["calls"] == len(runs.requests(spec))
    made = delivered_by(srv, lambda: run_suite(spec, cache=cache))
    assert made == est["totals"]["calls"]
    assert runs.estimate(spec, cache=cache)["totals"]["calls"] == 0


BATTERY = """
attacks:
  - {{level: char, rho: [0.5, 1.0]}}
consistency: {{instructions: true, option_orders: 2}}
{rti}
curve: {{items: 2, levels: [char], rho: [0.5]}}
samples: 3
"""


def battery(srv: FakeOpenAI, data_path, rti: str = ""):
    return parse_attack_spec(f"""
model: {{backend: openai, name: fake-a, base_url: "{srv.base_url}", api_key_env: DBPA_TEST_KEY, max_retries: 0}}
data: {data_path}
seed: 3
{BATTERY.format(rti=rti)}""")


def test_a_batterys_estimate_is_the_calls_its_run_makes(tmp_path, srv, data):  # noqa: F811
    spec = battery(srv, data)
    cache = Cache(tmp_path / "c")
    est = runs.estimate(spec, cache=cache)
    assert est["calls"] == len(runs.requests(spec)) and est["curve"] > 0
    made = delivered_by(srv, lambda: run_battery(spec, cache=cache))
    assert made == est["calls"]
    assert runs.estimate(spec, cache=cache)["calls"] == 0


def test_rti_is_counted_at_its_bound(tmp_path, srv, data):  # noqa: F811
    spec = battery(srv, data, rti="rti: [delete]")
    cache = Cache(tmp_path / "c")
    est = runs.estimate(spec, cache=cache)
    made = delivered_by(srv, lambda: run_battery(spec, cache=cache))
    assert est["answers"] + est["curve"] <= made <= est["calls"]  # RTI stops early, never later


def test_the_estimate_follows_the_requests_the_run_declares(tmp_path, srv, data, monkeypatch):  # noqa: F811
    """Whatever the run interface says a spec asks is what the estimate counts (audit,
    suite, battery): it enumerates no arms or parts of its own."""
    audit_spec = parse_spec(audit_text(srv))
    suite_spec = parse_spec(audit_text(srv, cases="cases: [{name: Ann}, {name: Bo}]", prompt="{name} is 61"))
    battery_spec = battery(srv, data)
    full = {id(s): len(runs.requests(s)) for s in (audit_spec, suite_spec, battery_spec)}

    def every_other(orig):
        return classmethod(lambda cls, spec: None if (r := orig(spec)) is None else r[::2])

    monkeypatch.setattr(AuditRun, "requests_of", every_other(AuditRun.requests_of))
    monkeypatch.setattr(BatteryRun, "requests_of", every_other(BatteryRun.requests_of))
    assert runs.estimate(audit_spec)["totals"]["calls"] == (full[id(audit_spec)] + 1) // 2
    # a suite's requests are each case's audit requests, so they are halved too
    assert (
        runs.estimate(suite_spec)["totals"]["calls"] == len(runs.requests(suite_spec)) < full[id(suite_spec)]
    )
    assert runs.estimate(battery_spec)["calls"] == (full[id(battery_spec)] + 1) // 2

    # given the requests, the count needs no arm of the spec
    reqs = runs.requests(audit_spec)
    monkeypatch.setattr(audit_mod, "build_arms", lambda *a, **k: pytest.fail("the estimate built arms"))
    assert audit_estimate(audit_spec, reqs)["totals"]["calls"] == len(reqs)
