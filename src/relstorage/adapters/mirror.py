"""The JSON mirror's rows (the mirror role; see relstorage.mirror and
docs/json.rst).

A commit of a client with ``json-state`` writes, beside its pickles, one
row of ``object_json`` per object it stores: the class, and the state
rendered as JSON.  The row takes its tid from the object's current
revision (``current_object``, or ``object_state`` without history), so
the statements run after the commit's rows are in place and before its
COMMIT, in the same database transaction; where the last step of a
commit is one round trip, they ride in it.  An object the commit deletes
loses its row.

A database's subclass gives its parameter style, how a parameter becomes
JSON, and its upsert.
"""
from relstorage.adapters.interfaces import IMirror
from relstorage.adapters.objects import batched
from zope.interface import implementer


@implementer(IMirror)
class Mirror:

    PARAM = '?'
    #: How a state's parameter is written in the statement.
    STATE = '?'
    #: The end of the upsert: replace an existing row's values.
    UPSERT = """
        ON CONFLICT (zoid) DO UPDATE SET
            tid = excluded.tid, class_module = excluded.class_module,
            class_name = excluded.class_name, state = excluded.state"""
    #: Rows per statement (five parameters each).
    CHUNK = 200

    def __init__(self, keep_history):
        self.current = 'current_object' if keep_history else 'object_state'

    def statements(self, rows, deleted):
        """``[(sql, params)]`` that write ``rows`` (``(zoid, module,
        name, json text or None)``) and remove the rows of ``deleted``
        (zoids)."""
        p = self.PARAM
        value = (f'({p}, (SELECT tid FROM {self.current} WHERE zoid = {p}), '
                 f'{p}, {p}, {self.STATE})')
        out = []
        for chunk in batched(rows, self.CHUNK):
            params = []
            for zoid, module, name, state in chunk:
                params += (zoid, zoid, module, name, state)
            out.append((
                'INSERT INTO object_json '
                '(zoid, tid, class_module, class_name, state) VALUES '
                + ', '.join([value] * len(chunk)) + self.UPSERT, params))
        for chunk in batched(deleted, 500):
            out.append((
                'DELETE FROM object_json WHERE zoid IN ('
                + ', '.join([p] * len(chunk)) + ')', list(chunk)))
        return out

    def write(self, cursor, rows, deleted):
        """Run ``statements`` on ``cursor``."""
        for sql, params in self.statements(rows, deleted):
            cursor.execute(sql, params)
