"""The run history's schema migrations (Alembic), shipped with the package: they run by
themselves when dbpa opens an older database (see :mod:`dbpa_core.db`)."""
