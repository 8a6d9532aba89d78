"""The store's names where they were before the store was split into modules.

``autogpt_core.agent`` and ``autogpt_core.cli`` (and scripts) import them from here; new
code imports them from ``autogpt_core``, or from the module that holds each.
"""

from __future__ import annotations

from ._async import AsyncStore as AsyncStore
from ._interface import SessionStore as SessionStore
from ._migrations import MIGRATIONS as MIGRATIONS
from ._migrations import SCHEMA_VERSION as SCHEMA_VERSION
from ._records import ArtifactRecord as ArtifactRecord
from ._records import CycleRecord as CycleRecord
from ._records import CycleWrite as CycleWrite
from ._records import Page as Page
from ._records import SessionFootprint as SessionFootprint
from ._records import SessionRecord as SessionRecord
from ._records import SessionStatus as SessionStatus
from ._records import StatusWrite as StatusWrite
from ._records import StoredEvent as StoredEvent
from ._records import WriteOp as WriteOp
from ._sqlite import Store as Store
