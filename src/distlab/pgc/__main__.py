"""``python -m distlab.pgc VERB``: a forward to ``python -m distlab pgc VERB`` (:mod:`.cli`)."""

from .cli import main

raise SystemExit(main())
