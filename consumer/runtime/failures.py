"""What the runtime writes of an exception in DLQ reasons and log lines: the one place that turns one into text.

By default its type and text, ``ValueError: alice@example.com is not a customer``: operators triage by it. A handler
that declares ``@worker(error_text="omit")`` gets its type and where its own code raised it instead,
``ValueError at workers/orders.py:42 in handle (error text omitted)``: an exception's text often holds a value from
the message, personal data a sender chose, and DLQ reasons and logs are kept and read far from the data's owner.
"""

from __future__ import annotations

import sys
import traceback
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from consumer.declaration import error_text_of

#: Said in place of the text, so a reader knows it was left out on purpose.
OMITTED = "error text omitted"


@dataclass(frozen=True)
class FailureText:
    """Describes an exception for a DLQ reason or a log line (call it with the exception).

    ``omit``: leave the text out (``@worker(error_text="omit")``). ``code``: the handler's code, its top-level
    package's directory or its module's file; the location named is the deepest frame of the traceback inside it
    (where the handler raised, or called the library that did), else the deepest frame there is.
    """

    omit: bool = False
    code: Path | None = None

    @classmethod
    def of(cls, handler: Callable[..., Any]) -> FailureText:
        """What ``handler`` declared, located in its own code."""
        return cls(omit=error_text_of(handler) == "omit", code=handler_code(handler))

    def __call__(self, error: BaseException) -> str:
        name = type(error).__name__
        if not self.omit:
            return f"{name}: {error}"
        return f"{name} at {self.location(error)} ({OMITTED})"

    def location(self, error: BaseException) -> str:
        """``file:line in function`` of the frame that raised ``error``, inside the handler's code if it passed there."""
        frames = traceback.extract_tb(error.__traceback__)
        if not frames:
            return "an unknown place (no traceback)"
        inside = [frame for frame in frames if self._inside(frame.filename)]
        frame = (inside or frames)[-1]
        return f"{self._shown(frame.filename)}:{frame.lineno} in {frame.name}"

    def _inside(self, filename: str) -> bool:
        if self.code is None:
            return False
        path = Path(filename).resolve()
        return path == self.code or (self.code.is_dir() and path.is_relative_to(self.code))

    def _shown(self, filename: str) -> str:
        """The file relative to the directory holding the handler's code (``workers/orders.py``); another file (a
        library's) by its last two parts (``json/decoder.py``)."""
        path = Path(filename).resolve()
        if self.code is not None and self._inside(filename):
            return path.relative_to(self.code.parent).as_posix()
        return "/".join(path.parts[-2:])


def handler_code(handler: Callable[..., Any]) -> Path | None:
    """Where ``handler``'s code lives: the directory of its top-level package (``workers/``), or the file of a module
    outside any package; None when it cannot be told (a handler built at run time)."""
    module_name = getattr(handler, "__module__", None)
    top = sys.modules.get(module_name.split(".")[0]) if isinstance(module_name, str) else None
    if top is None:
        return None
    paths = list(getattr(top, "__path__", None) or [])
    if paths:
        return Path(paths[0]).resolve()
    file = getattr(top, "__file__", None)
    return Path(file).resolve() if file else None
