"""Loading the embedding model prints nothing of its own: transformers' "Loading weights" bar
showed amid the run's progress, in ``--quiet`` runs and in CI logs."""

import dbpa_core.embedders as embedders


def test_loading_the_embedder_shows_no_bar_and_restores_the_setting(monkeypatch, capfd):
    from transformers.utils import logging as hf_logging

    monkeypatch.setattr(embedders, "_MODELS", {})  # load it for real, not from this process's cache
    embedders.LocalEmbedder().prepare()
    err = capfd.readouterr().err
    assert "Loading weights" not in err and "it/s" not in err, err
    assert hf_logging.is_progress_bar_enabled()  # the caller's own setting is left as it was
