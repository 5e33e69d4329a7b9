import sys

from .runtime.forkserver import delegate

# under `distlab forkserver` (make reproduce): run in a child forked from the preloaded server
_status = delegate(sys.argv[1:])
if _status is not None:
    raise SystemExit(_status)

from .cli import main  # noqa: E402

raise SystemExit(main())
