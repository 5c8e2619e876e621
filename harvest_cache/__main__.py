import sys

from harvest_cache.cli import main

sys.exit(main())
