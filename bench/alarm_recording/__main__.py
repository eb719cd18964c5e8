"""``python -m bench.alarm_recording NAME`` (or ``--all``): record real local runs as alarm scenarios."""

import sys

from bench.alarm_recording.record import main

sys.exit(main())
