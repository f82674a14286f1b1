"""Tests of epstack.jit."""

import os
import sys
from pathlib import Path

# PATH for the entrypoint's scripts: the `epstack` command beside the running Python first, as in an image.
EPSTACK_PATH = f"{Path(sys.executable).parent}{os.pathsep}{os.environ['PATH']}"
