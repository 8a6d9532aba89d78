"""``autogpt store migrate``: copy every session from one session store into another.

Reads and writes go through the ``SessionStore`` interface only, so any store can be
the source or the target (typically a SQLite file into PostgreSQL).

Kept: session ids, goals, workspaces, options, ``created_at``, statuses, results,
budgets; cycles (numbers, contents, ``completed_at``); events in order, with their
kind, cycle, data and timestamp; artifact ids, paths, ``agent_created`` and cycle.
Not kept, because the interface has no way to set them: a session's ``updated_at``
(the target sets it when the copy is written), event ids (the target numbers them
anew, in the same order) and artifacts' ``created_at`` (the time of the copy; their
order is kept). Leases are not copied: a session the source runs is refused.
"""

from __future__ import annotations

import argparse
from collections.abc import Iterator
from pathlib import Path
from typing import TYPE_CHECKING, Any

import attrs

from .._config import load_config
from .._errors import AutoGPTError, SessionNotFound

if TYPE_CHECKING:
    from ..store._interface import SessionStore
    from ..store._records import ArtifactRecord, SessionRecord, StoredEvent

_PAGE = 500


class MigrationRefused(AutoGPTError):
    """A session cannot be copied; the message names it and says how to fix that."""


def add_store_parser(sub: Any) -> None:
    store = sub.add_parser(
        "store", help="manage the session store ('autogpt store migrate --to URL')"
    )
    actions = store.add_subparsers(dest="store_command", metavar="ACTION")
    store.set_defaults(handler=lambda _args: _help(store))
    migrate = actions.add_parser(
        "migrate",
        help="copy every session into another session store (e.g. PostgreSQL)",
        description="Copy every session (its row, cycles, events and artifact records; "
        "not its lease) from the current session store into the one at --to. Session ids, "
        "statuses, results, budgets, cycles, event order and artifact ids are kept. A "
        "session that is running is refused, and so is one the target holds already "
        "(unless --skip-existing). The source is not changed.",
    )
    migrate.add_argument(
        "--to",
        required=True,
        metavar="URL",
        help="the target store: a postgresql:// URL, or a SQLite file's path",
    )
    migrate.add_argument(
        "--from",
        dest="source",
        metavar="PATH_OR_URL",
        help="the source store (default: the config's store, as 'autogpt sessions' uses)",
    )
    migrate.add_argument(
        "--skip-existing",
        action="store_true",
        help="leave sessions the target already holds as they are, instead of refusing",
    )
    migrate.set_defaults(handler=cmd_store_migrate)


def _help(parser: argparse.ArgumentParser) -> int:
    parser.print_help()
    return 0


def _location(text: str) -> Path | str:
    from ..store._open import is_postgres_url

    return text if is_postgres_url(text) else Path(text).expanduser()


@attrs.define
class Copied:
    """What a migration copied (or skipped)."""

    sessions: int = 0
    cycles: int = 0
    events: int = 0
    artifacts: int = 0
    skipped: list[str] = attrs.field(factory=list)


def cmd_store_migrate(args: argparse.Namespace) -> int:
    from hookspecs import printable

    from ..store._open import open_store, shown_location

    if args.source:
        source_location = _location(args.source)
    else:
        source_location = load_config(args.config).store_location
    target_location = _location(args.to)
    shown_source, shown_target = shown_location(source_location), shown_location(target_location)
    if isinstance(source_location, Path) and not source_location.exists():
        raise MigrationRefused(
            f"the source session store {shown_source} does not exist: give the store to "
            "copy with --from PATH_OR_URL"
        )
    if source_location == target_location or (
        isinstance(source_location, Path)
        and isinstance(target_location, Path)
        and target_location.exists()
        and source_location.resolve() == target_location.resolve()
    ):
        raise MigrationRefused(
            f"the source and target session stores are both {shown_source}: give another "
            "store with --to"
        )
    with open_store(source_location) as source, open_store(target_location) as target:
        copied = migrate(source, target, skip_existing=args.skip_existing)
    for session_id in copied.skipped:
        print(printable(f"Skipped session {session_id}: the target holds it already."))
    print(
        printable(
            f"Migrated {copied.sessions} session(s) from {shown_source} to {shown_target}: "
            f"{copied.cycles} cycle(s), {copied.events} event(s), "
            f"{copied.artifacts} artifact record(s)"
            + (f"; skipped {len(copied.skipped)} already there." if copied.skipped else ".")
        )
    )
    return 0


def migrate(source: SessionStore, target: SessionStore, *, skip_existing: bool) -> Copied:
    """Copy every session of ``source`` into ``target``; check them all before copying any.

    Raises ``MigrationRefused`` for a running or damaged session, or one ``target`` holds
    (unless ``skip_existing``); then nothing is copied.
    """
    sessions = list(_all_sessions(source))
    copied = Copied()
    to_copy: list[SessionRecord] = []
    for session in sessions:
        if session.damage:
            raise MigrationRefused(
                f"session {session.id} does not read back ({session.damage}); nothing was "
                f"migrated. Fix it, or delete it with 'autogpt sessions delete {session.id}'"
            )
        lease = source.get_lease(session.id)
        if lease is not None and lease.live():
            raise MigrationRefused(
                f"session {session.id} is running ({lease.describe()}); nothing was "
                "migrated. Wait for it to end or stop that process, then migrate again"
            )
        if _exists(target, session.id):
            if skip_existing:
                copied.skipped.append(session.id)
                continue
            raise MigrationRefused(
                f"the target store already holds session {session.id}; nothing was "
                "migrated. Pass --skip-existing to leave such sessions as they are"
            )
        to_copy.append(session)
    # Oldest first, so the target's newest-first listing ties break as the source's.
    for session in reversed(to_copy):
        _copy_session(source, target, session, copied)
    return copied


def _all_sessions(store: SessionStore) -> Iterator[SessionRecord]:
    offset = 0
    while True:
        page = store.list_sessions(offset=offset, limit=_PAGE)
        yield from page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return


def _exists(store: SessionStore, session_id: str) -> bool:
    try:
        store.get_session(session_id)
    except SessionNotFound:
        return False
    return True


def _all_events(store: SessionStore, session_id: str) -> Iterator[StoredEvent]:
    after = 0
    while True:
        events = store.list_events(session_id, after_id=after, limit=_PAGE)
        yield from events
        if len(events) < _PAGE:
            return
        after = events[-1].id


def _all_artifacts(store: SessionStore, session_id: str) -> Iterator[ArtifactRecord]:
    offset = 0
    while True:
        page = store.list_artifacts(session_id, offset=offset, limit=_PAGE)
        yield from page.items
        offset += len(page.items)
        if not page.items or offset >= page.total:
            return


def _kind(kind: str) -> Any:
    """An event's kind as ``Event`` takes it: the enum member, or the text as stored."""
    from hookspecs import EventKind

    try:
        return EventKind(kind)
    except ValueError:
        return kind


def _copy_session(
    source: SessionStore, target: SessionStore, session: SessionRecord, copied: Copied
) -> None:
    from hookspecs import Event

    from ..store._records import CycleWrite, StatusWrite, WriteOp

    record = source.get_session(session.id)  # the full row, as get_session reads it
    cycles = source.load_cycles(record.id)
    events = list(_all_events(source, record.id))
    artifacts = list(_all_artifacts(source, record.id))
    ops: list[WriteOp] = [CycleWrite(cycle) for cycle in cycles]
    ops += [
        Event(
            kind=_kind(event.kind),
            session_id=event.session_id,
            cycle=event.cycle,
            data=event.data,
            timestamp=event.timestamp,
        )
        for event in events
    ]
    ops.append(StatusWrite(record.id, record.status, result=record.result, budget=record.budget))
    target.create_session(
        record.goal,
        record.workspace,
        session_id=record.id,
        config=record.config,
        status=record.status,
        created_at=record.created_at,
    )
    try:
        target.write_many(ops)
        for artifact in artifacts:
            target.add_artifact(
                record.id,
                artifact.relative_path,
                agent_created=artifact.agent_created,
                cycle=artifact.cycle,
                artifact_id=artifact.id,
            )
    except BaseException:
        target.delete_session(record.id)  # no half-copied session left behind
        raise
    copied.sessions += 1
    copied.cycles += len(cycles)
    copied.events += len(events)
    copied.artifacts += len(artifacts)
