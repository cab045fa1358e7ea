"""``python -m chaos``: see :mod:`chaos.run`."""

from __future__ import annotations

from chaos.run import main

raise SystemExit(main())
