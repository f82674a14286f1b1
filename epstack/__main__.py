import sys

# `python -m epstack`: an entry point, imported by nothing, so its arrow up to commands/ closes no loop.
from epstack.commands.main import main

sys.exit(main())
