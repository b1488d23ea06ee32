"""Packing: remove what no one can reach any more, without stopping writers.

The pipeline, on a database connection of its own, holding the database's
pack lock (one pack at a time; zodbpack and storage.pack alike):

1. **References** (with garbage collection).  The references of each
   object's current revision are read from its pickle once and kept in
   ``object_ref``; each pack first adds the objects written since the
   previous one (the first pack reads them all, in key order; a later
   one in key order too when they are many, else in the order written;
   the next page read by a thread of its own meanwhile), and
   (history-preserving) the kept revisions of objects changed after the
   pack tid, which are no longer current.  Revisions replaced before any
   pack looked are never read: this pack removes them.  Pages are
   committed together with how far the analysis has got (``pack_state``),
   so a pack killed here loses at most one page.
2. **Analysis** (pre-pack).  Choose the pack tid (the pack time, moved
   back before the start of the oldest transaction another session of the
   database still has open, which may hold objects that were reachable when
   it began); record in ``pack_object`` each object's newest revision at
   or before it (history-preserving: objects not written since a pack
   that ran to its end are taken as that pack left them, without reading
   their revisions, when they are most of the database); walk the graph in SQL from the root, from the objects
   written after the pack tid and from what they refer to, a step per
   statement (``pack_reached``).  What is not reached is garbage.  The
   analysis is kept in ``pack_run`` until the deletions are done, so that a
   later pack can use it (pack-skip-prepack) or go on after a stop.
3. **Deletion**, in batches, each its own short write transaction (no
   commit lock: garbage is what no committer can reach, and old revisions
   are rows no committer writes), sized to pack-batch-timeout, with a
   pause after each to keep to pack-duty-cycle (at most pack-max-delay)
   while other clients are committing.
   Before the first batch, and every CATCH_UP_EVERY seconds after, the
   references of revisions committed since the analysis are added, and
   whatever they refer to is reached after all (an undo, or a client
   holding on to an object across transactions).
   Transactions up to the pack tid are marked packed first (undo refuses
   them from then on).  One pass in key order removes the garbage and
   (history-preserving) the revisions older than each kept one; each
   batch records where it got to.  (History-preserving on PostgreSQL 14
   and later: a pass over ``object_state``'s pages first removes every
   revision older than its object's kept one, then the pass by key the
   garbage; ``Packer.by_page``.)
   The steps of 1 and 2 are paced as the batches are (``throttle``):
   they hold no lock a committer takes, but they share the server.
4. **Finish**: transactions left without data are removed, the analysis
   tables emptied; a pack that ran from its analysis to its end, skipping
   no object, leaves its own row in ``pack_run`` for the next to build
   on.  Then blob data no revision refers to any more (also
   what an interrupted pack left), and with a blob-dir the files of removed
   revisions.

Progress goes to a ``Progress`` (the default logs at INFO level); a
progress that asks to stop makes the pack raise ``PackStopped`` at the
next batch boundary.

The modules: ``session`` (one pack's connection and lock, the entry
points), ``analysis`` (steps 1 and 2), ``deletion`` (3 and 4) and
``throttle`` (batch sizes and pauses).  May import: ``adapters`` (the
packer role) and the base modules.
"""
from relstorage.pack.session import check_refs
from relstorage.pack.session import pack

__all__ = ['pack', 'check_refs']
