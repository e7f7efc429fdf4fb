"""Dashboard helpers: figures (result -> plotly Figure), session state, running audits."""
