import sys

from draft_head_fp8.cli import main

sys.exit(main())
