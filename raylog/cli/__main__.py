import sys

from raylog.cli import main

sys.exit(main())
