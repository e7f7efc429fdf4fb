"""``python -m dbpa_core.cli``: the ``dbpa`` command."""

from . import main

raise SystemExit(main())
