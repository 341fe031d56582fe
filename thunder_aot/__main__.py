import sys

from thunder_aot.cli import main

sys.exit(main())
