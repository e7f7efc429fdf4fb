"""One file per revision of the schema (never edit one that has shipped; add a new one)."""
