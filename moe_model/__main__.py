"""`python -m moe_model ...`: see moe_model.cli."""

from moe_model.cli.main import main

raise SystemExit(main())
