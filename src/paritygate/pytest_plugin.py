"""pytest plugin (registered through the ``pytest11`` entry point).

Importing :mod:`paritygate` never imports this module or pytest.
"""

from __future__ import annotations
