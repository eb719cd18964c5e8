"""Records the consumer runtime's AWS calls in subprocesses the integration tests start (see runtime_call_recorder).

Active only when the tests put this directory on ``PYTHONPATH`` and set the record directory variable;
it imports nothing heavy, and wraps botocore only if the process imports it.
"""

import runtime_call_recorder

runtime_call_recorder.install_in_subprocess()
