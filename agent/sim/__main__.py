"""`python3 -m agent.sim serve MODEL [flags]`: the same command line as `vllm serve`."""

import sys

from .main import main

sys.exit(main(sys.argv[1:]))
