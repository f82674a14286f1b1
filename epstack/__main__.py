import sys

from epstack.cli import main

sys.exit(main())
