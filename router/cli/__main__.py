import logging
import sys

from router.cli.main import main

logging.basicConfig()
sys.exit(main())
