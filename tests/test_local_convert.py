"""Where the embedded model's converted copy is looked up and written, and that a
conversion at run time says so (the conversion itself is faked: it takes ~40 s)."""

import pytest

from dbpa_core.backends import local


@pytest.fixture
def fake(monkeypatch, tmp_path):
    env = tmp_path / "venv" / "share" / "dbpa" / "models" / local.SMOLLM2_NAME
    monkeypatch.setattr(local, "installed_smollm2_dir", lambda: env)
    made = []

    def convert(target):
        target.mkdir(parents=True)
        (target / "model.safetensors").write_bytes(b"x")
        (target / "config.json").write_text("{}")
        made.append(target)

    monkeypatch.setattr(local, "_convert", convert)
    return env, made


def test_the_environment_copy_comes_first_then_the_cache_folders(fake, tmp_path):
    env, made = fake
    cache = tmp_path / "cache"
    said = []
    assert local.converted_smollm2_dir(cache, on_status=said.append) == env  # converted once
    assert made == [env] and said == [local.CONVERTING]
    assert local.converted_smollm2_dir(tmp_path / "other", on_status=said.append) == env
    assert len(made) == 1 and len(said) == 1  # found, silent
    assert not cache.exists()


def test_a_read_only_environment_converts_into_the_cache_folder(fake, tmp_path, monkeypatch):
    _env, made = fake
    monkeypatch.setattr(local, "_writable", lambda folder: False)
    cache = tmp_path / "cache"
    said = []
    target = local.converted_smollm2_dir(cache, on_status=said.append)
    assert target == cache / "models" / local.SMOLLM2_NAME and made == [target]
    assert said == [local.CONVERTING]
    # an earlier cache-folder copy is still found (runs before make venv converted it)
    assert local.converted_smollm2_dir(cache) == target


def test_the_backend_is_ready_without_loading_when_nothing_is_converted(fake, tmp_path):
    b = local.LocalBackend(tmp_path / "cache")
    assert not b.ready and b.path == ""  # a look, no conversion
    assert not fake[1]


def test_prepare_command_reports_where(capsys, fake):
    env, made = fake
    assert local.main(["prepare"]) == 0
    assert made == [env] and "converting the embedded model (once, ~40 s)" in capsys.readouterr().out
    assert local.main(["prepare"]) == 0
    assert "ready in" in capsys.readouterr().out
