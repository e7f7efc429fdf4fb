"""``dbpa attack --batch``: the battery's uncached samples (answers, every RTI round, the
robustness curve) as one Batch API job against the fake Batch API on 127.0.0.1; the battery
then runs from the cache with no chat call, and finds what a live run finds."""

import json

import pytest

from dbpa_core import batch
from dbpa_core.attacks.spec import parse_attack_spec
from dbpa_core.cache import Cache
from dbpa_core.cli import main
from dbpa_core.runs import estimate
from dbpa_core.sampling import backend_identity, sample_key

from . import fake_openai
from .fake_batch import FakeBatch
from .rule_model import rule_answer
from .test_attacks_battery import VOCAB, data  # noqa: F401 - `data` is a fixture

BODY = """
attacks:
  - {level: char, rho: [0.5, 1.0]}
  - {level: word, rho: [0.5], op: delete}
consistency: {instructions: true, option_orders: 2}
rti: [insert, delete]
curve: {items: 2, levels: [char], rho: [0.5]}
samples: 4
prices: {fake-model: {input: 2.0, output: 8.0}}
"""


def answer(prompt: str, seed: int, index: int = 0) -> str:
    """The rule model's answer, with words drawn by the seed (the curve's samples differ)."""
    return rule_answer(prompt, VOCAB, temperature=1.0, seed=seed)


@pytest.fixture
def srv(monkeypatch):
    monkeypatch.setattr(fake_openai, "fake_text", answer)  # live answers = batch answers
    monkeypatch.setattr(batch, "POLL_FIRST", 0.0)  # the CLI's pauses between looks
    with FakeBatch(models=("fake-model",), answer=answer) as s:
        yield s


def spec_file(tmp_path, srv, data, body=BODY):  # noqa: F811
    p = tmp_path / "battery.yaml"
    p.write_text(f"""
name: batched battery
model: {{backend: openai, name: fake-model, base_url: "{srv.base_url}", max_retries: 0}}
data: {data}
seed: 3
{body}""")
    return p


def attack(tmp_path, spec, cache, out, *more):
    return main(
        [
            "--cache-dir",
            str(tmp_path / cache),
            "attack",
            str(spec),
            "--out",
            str(tmp_path / out),
            "--quiet",
            "--no-history",
            *more,
        ]
    )


def results(tmp_path, out):
    d = json.loads((tmp_path / out / "results.json").read_text())
    d.pop("usage", None)
    return d


def test_batch_then_no_chat_call_and_the_live_results(tmp_path, srv, data, capsys):  # noqa: F811
    spec = spec_file(tmp_path, srv, data)
    assert attack(tmp_path, spec, "cb", "ob", "--batch") == 0
    printed = capsys.readouterr()
    assert srv.chat_ok == 0  # every answer of the battery came from the one job
    assert (srv.uploads, len(srv.created)) == (1, 1)
    assert "at the batch price" in printed.err and "0 new calls" in printed.out
    lines = srv.lines(srv.created[0]["input_file_id"])
    assert len({x["custom_id"] for x in lines}) == len(lines)  # each sample once
    assert any(x["body"].get("temperature") for x in lines)  # the curve's samples are in it
    # the same battery live, on a fresh cache: the same answers, the same results
    assert attack(tmp_path, spec, "cl", "ol") == 0
    assert srv.chat_ok > 0
    assert results(tmp_path, "ob") == results(tmp_path, "ol")
    assert results(tmp_path, "ob")["rti"]  # RTI was run from the job's answers
    # everything cached: a second --batch run sends no job
    assert attack(tmp_path, spec, "cb", "ob2", "--batch") == 0
    assert len(srv.created) == 1


def test_battery_jobs_are_what_the_battery_asks(tmp_path, srv, data):  # noqa: F811
    """The job's keys cover every sample a live battery caches (RTI at its upper bound)."""
    spec = parse_attack_spec(spec_file(tmp_path, srv, data).read_text())
    live = Cache(tmp_path / "live")
    assert attack(tmp_path, spec_file(tmp_path, srv, data), "live", "o") == 0
    keys = {sample_key(backend_identity(m), r) for m, r in batch.jobs(spec)}
    asked = [k for k in keys if k in live]
    assert len(asked) == srv.chat_ok  # every live call is among the job's lines
    est = estimate(spec)
    assert len(keys) == est["calls"]  # the job asks what --estimate counts, RTI's bound too


def test_estimate_shows_the_batch_price(tmp_path, srv, data, capsys):  # noqa: F811
    spec = spec_file(tmp_path, srv, data)
    assert main(["--cache-dir", str(tmp_path / "c"), "attack", str(spec), "--estimate"]) == 0
    out = capsys.readouterr().out
    listed = float(out.split("estimated cost $")[1].split()[0])
    through = float(out.split("--batch, every RTI round asked): $")[1].split()[0])
    assert listed > 0 and through == pytest.approx(listed * 0.5, abs=1e-4)
    assert srv.chat_ok == 0 and not srv.created


def test_stopped_while_pending_then_picked_up_by_the_cli(tmp_path, srv, data):  # noqa: F811
    spec_path = spec_file(tmp_path, srv, data)
    spec = parse_attack_spec(spec_path.read_text())
    cache = Cache(tmp_path / "c")
    srv.hold = True
    looks: list[int] = []
    with pytest.raises(batch.BatchPending):
        batch.fill_cache(
            batch.jobs(spec),
            cache,
            sleep=lambda s: None,
            should_stop=lambda: len(looks) > 1 or looks.append(1),
        )
    assert len(list((tmp_path / "c" / "batches").glob("*.json"))) == 1
    srv.hold = False  # the job ends while nobody watches
    assert attack(tmp_path, spec_path, "c", "o", "--batch") == 0
    assert (srv.uploads, len(srv.created)) == (1, 1)  # the same job: paid once
    assert srv.chat_ok == 0


def test_partial_failures_exit_3_and_a_rerun_sends_only_them(
    tmp_path,
    srv,
    data,  # noqa: F811
    capsys,
):
    spec = spec_file(tmp_path, srv, data)
    srv.fail_lines, srv.malformed_lines = {0}, {3}
    assert attack(tmp_path, spec, "c", "o", "--batch") == 3
    err = capsys.readouterr().err
    assert "2 of" in err and "batch request(s) failed" in err and "Traceback" not in err
    assert srv.chat_ok == 0 and not (tmp_path / "o" / "results.json").exists()
    bad = {srv.lines("file-1")[i]["custom_id"] for i in (0, 3)}
    srv.fail_lines, srv.malformed_lines = set(), set()
    assert attack(tmp_path, spec, "c", "o", "--batch") == 0
    assert len(srv.created) == 2
    assert {x["custom_id"] for x in srv.lines(srv.created[1]["input_file_id"])} == bad
    assert srv.chat_ok == 0


def test_batch_needs_the_cache(tmp_path, srv, data, capsys):  # noqa: F811
    spec = spec_file(tmp_path, srv, data)
    assert attack(tmp_path, spec, "c", "o", "--batch", "--no-cache") == 2
    assert "--no-cache" in capsys.readouterr().err and not srv.created


@pytest.mark.parametrize("outcome", ["expired", "cancelled"])
def test_expired_job_keeps_its_answers_and_a_rerun_sends_the_rest(
    tmp_path,
    srv,
    data,  # noqa: F811
    capsys,
    outcome,
):
    spec = spec_file(tmp_path, srv, data)
    srv.outcome, srv.answered = outcome, 5
    assert attack(tmp_path, spec, "c", "o", "--batch") == 3
    err = capsys.readouterr().err
    assert f"batch_1 at {srv.base_url.rstrip('/')}" in err and outcome in err
    assert [x for x in err.splitlines() if x.startswith("error:")] == err.splitlines()[
        1:
    ]  # after the price, one line
    assert srv.chat_ok == 0 and "Traceback" not in err
    sent = len(srv.lines(srv.created[0]["input_file_id"]))
    srv.outcome = "completed"
    assert attack(tmp_path, spec, "c", "o", "--batch") == 0
    assert len(srv.lines(srv.created[1]["input_file_id"])) == sent - 5  # only the rest
    assert srv.chat_ok == 0
