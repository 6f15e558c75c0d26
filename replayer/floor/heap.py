"""The cyclic garbage collector paused while a parse or a plan builds its records and models.

A parse allocates hundreds of thousands of containers (the records, their checks, the step models) and
frees none of them, so each of the collector's passes it triggers finds nothing to collect, and its full
passes walk everything built so far: on a long session they cost about as much as reading the file. What
a parse builds holds no reference cycles; reference counting frees it. The collector runs again, as
before, once the outermost pause ends.
"""

from __future__ import annotations

import gc
from collections.abc import Iterator
from contextlib import contextmanager


@contextmanager
def collector_paused() -> Iterator[None]:
    """Nested pauses, or one inside code that disabled the collector itself, leave it as they found it.

    When the outermost pause ends, what was built meanwhile is moved to the oldest generation unwalked
    (`gc.freeze` then `gc.unfreeze`, two list splices): left in the youngest, the first allocation after
    `gc.enable` would walk all of it at once, as long as a quarter of the parse, to find nothing to free.
    The next full pass, which walks the oldest generation anyway, sees it as it sees any long-lived object.
    """
    was_enabled = gc.isenabled()
    gc.disable()
    try:
        yield
    finally:
        if was_enabled:
            gc.freeze()
            gc.unfreeze()
            gc.enable()
