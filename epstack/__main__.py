import sys

from epstack.commands.main import main

sys.exit(main())
