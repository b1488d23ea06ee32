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
import json

from relstorage.adapters.interfaces import IMirror
from relstorage.adapters.objects import _bytes
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
    #: Whether the database reads rows from one JSON array in one
    #: statement (``_bulk``).
    ONE_ARRAY = False

    def __init__(self, keep_history):
        self.current = 'current_object' if keep_history else 'object_state'
        # The current revisions with a state: (zoid, tid, state).
        self.revisions = (
            'current_object c JOIN object_state o '
            'ON o.zoid = c.zoid AND o.tid = c.tid' if keep_history
            else 'object_state o')

    #: The staging table of a commit too large to keep its rows in memory
    #: (``spill``): the columns of object_json, the tid left NULL.
    TEMP_JSON = """
        CREATE TEMP TABLE IF NOT EXISTS temp_json (
            zoid INTEGER NOT NULL PRIMARY KEY, tid INTEGER,
            class_module TEXT, class_name TEXT, state TEXT)"""

    def statements(self, rows, deleted, staged=False):
        """``[(sql, params)]`` that write ``rows`` (``(zoid, module,
        name, json text or None)``) and remove the rows of ``deleted``
        (zoids); with ``staged``, first the rows the transaction staged
        (``spill``), which ``rows`` and ``deleted`` then override."""
        out = []
        if staged:
            # (WHERE true: SQLite's parser needs it before ON CONFLICT.)
            out.append((
                'INSERT INTO object_json '
                '(zoid, tid, class_module, class_name, state) '
                'SELECT t.zoid, c.tid, t.class_module, t.class_name, '
                f't.state FROM temp_json t JOIN {self.current} c '
                'ON c.zoid = t.zoid WHERE 1 = 1' + self.UPSERT, ()))
        if rows:
            out += self._insert(rows, 'object_json')
        return out + self._delete(deleted)

    def spill_statements(self, rows, first):
        """``[(sql, params)]`` that stage ``rows`` (as for
        ``statements``) in ``temp_json``, out of the client's memory,
        during a commit too large to keep them there; with ``first`` (the
        transaction's first spill), after making the table where it is
        missing and emptying it of what an earlier transaction left."""
        out = [(self.TEMP_JSON, ()), ('DELETE FROM temp_json', ())] \
            if first else []
        return out + self._insert(rows, 'temp_json')

    def spill(self, cursor, rows, first):
        """Run ``spill_statements`` on ``cursor``."""
        for sql, params in self.spill_statements(rows, first):
            cursor.execute(sql, params)

    def _insert(self, rows, table):
        """Statements that write ``rows`` into ``table``: object_json,
        each row taking the tid of the object's current revision, or
        temp_json, without one.  One statement of one JSON array where
        the database reads one (ONE_ARRAY: the server parses the array
        once; benchmarks/mirror.py, 5,000 documents added in commits of
        100, history-preserving PostgreSQL: 2.45 s against 3.60 with 200
        rows of five parameters a statement, 1.11 without the mirror)."""
        if self.ONE_ARRAY:
            return [self._bulk(rows, False, table)]
        p = self.PARAM
        current = table == 'object_json'
        tid = (f'(SELECT tid FROM {self.current} WHERE zoid = {p})'
               if current else 'NULL')
        value = f'({p}, {tid}, {p}, {p}, {self.STATE})'
        out = []
        for chunk in batched(rows, self.CHUNK):
            params = []
            for zoid, module, name, state in chunk:
                params += (zoid, zoid) if current else (zoid,)
                params += (module, name, state)
            out.append((
                f'INSERT INTO {table} '
                '(zoid, tid, class_module, class_name, state) VALUES '
                + ', '.join([value] * len(chunk)) + self.UPSERT, params))
        return out

    def _delete(self, deleted):
        p = self.PARAM
        return [('DELETE FROM object_json WHERE zoid IN ('
                 + ', '.join([p] * len(chunk)) + ')', list(chunk))
                for chunk in batched(deleted, 500)]

    # -- relstorage-mirror: filling in what commits did not write ---------

    def behind(self, cursor, after, limit):
        """``[(zoid, tid, state)]``, in zoid order past ``after``, of the
        current revisions (with a state) whose mirror row is missing or
        of another revision."""
        p = self.PARAM
        cursor.execute(
            f'SELECT o.zoid, o.tid, o.state FROM {self.revisions} '
            f'LEFT JOIN object_json j ON j.zoid = o.zoid AND j.tid = o.tid '
            f'WHERE o.zoid > {p} AND o.state IS NOT NULL AND j.zoid IS NULL '
            f'ORDER BY o.zoid LIMIT {p}', (after, limit))
        return [(zoid, tid, _bytes(state))
                for zoid, tid, state in cursor.fetchall()]

    def fill(self, cursor, rows):
        """Write ``rows`` (``(zoid, tid, module, name, JSON text or
        None)``), each only where ``tid`` is still the object's current
        revision: one a commit replaced meanwhile is left to that commit
        (or to the next fill)."""
        for sql, params in self.fill_statements(rows):
            cursor.execute(sql, params)

    def fill_statements(self, rows):
        """``[(sql, params)]`` of ``fill``: 200 rows a statement, or one
        JSON array where the database reads one."""
        if self.ONE_ARRAY:
            return [self._bulk(rows, True)] if rows else []
        p = self.PARAM
        one = (f'SELECT zoid, tid, {p}, {p}, {self.STATE} '
               f'FROM {self.current} WHERE zoid = {p} AND tid = {p}')
        out = []
        for chunk in batched(rows, self.CHUNK):
            params = []
            for zoid, tid, module, name, state in chunk:
                params += (module, name, state, zoid, tid)
            out.append((
                'INSERT INTO object_json '
                '(zoid, tid, class_module, class_name, state) '
                + ' UNION ALL '.join([one] * len(chunk)) + self.UPSERT,
                params))
        return out

    def _from_array(self, rows, table, values, zoid, same=''):
        """``_bulk``'s statement: the INSERT into ``table`` of ``rows``
        sent as one JSON array; ``values`` the module, name and state read
        from it with the FROM that reads it, ``zoid`` the zoid read from
        it, ``same`` more of the join's condition."""
        if table == 'temp_json':
            source = f'SELECT {zoid}, NULL, {values}'
        else:
            source = (f'SELECT c.zoid, c.tid, {values} '
                      f'JOIN {self.current} c ON c.zoid = {zoid}{same}')
        return (f'INSERT INTO {table} '
                f'(zoid, tid, class_module, class_name, state) {source}'
                + self.UPSERT, (rows_array(rows),))

    def _bulk(self, rows, with_tid, table='object_json'):
        """With ONE_ARRAY: the statement (and its parameters) that writes
        ``rows`` sent as one JSON array (``rows_array``) of ``[zoid,
        module, name, state]``, or with ``with_tid`` of ``[zoid, tid,
        module, name, state]``, each row only where that tid is still the
        object's current one; into ``table`` (``temp_json``: without a
        tid, ``spill``)."""
        raise NotImplementedError

    def orphans(self, cursor, delete=False):
        """The rows of objects that no longer have a state (deleted, or
        collected by a client that kept no mirror): how many, or removed
        with ``delete`` (returns how many went)."""
        gone = (f'NOT EXISTS (SELECT 1 FROM {self.revisions} '
                f'WHERE o.zoid = object_json.zoid AND o.state IS NOT NULL)')
        if delete:
            cursor.execute(f'DELETE FROM object_json WHERE {gone}')
            return max(cursor.rowcount, 0)
        cursor.execute(f'SELECT COUNT(*) FROM object_json WHERE {gone}')
        return cursor.fetchone()[0]

    def count(self, cursor):
        """``(objects with a state, mirror rows, rows of the current
        revision)``."""
        cursor.execute(
            f'SELECT COUNT(*), COUNT(j.zoid) FROM {self.revisions} '
            f'LEFT JOIN object_json j ON j.zoid = o.zoid AND j.tid = o.tid '
            f'WHERE o.state IS NOT NULL')
        objects, current = cursor.fetchone()
        cursor.execute('SELECT COUNT(*) FROM object_json')
        return objects, cursor.fetchone()[0], current


    # -- relstorage-query: the common questions ---------------------------

    def classes(self, cursor):
        """``[(module, name, objects, pickle bytes)]``, most objects
        first."""
        cursor.execute(
            'SELECT j.class_module, j.class_name, COUNT(*), '
            'SUM(o.state_size) FROM object_json j '
            'JOIN object_state o ON o.zoid = j.zoid AND o.tid = j.tid '
            'GROUP BY j.class_module, j.class_name '
            'ORDER BY COUNT(*) DESC, j.class_module, j.class_name')
        return [(module, name, count, int(size or 0))
                for module, name, count, size in cursor.fetchall()]

    def find(self, cursor, path, value, cls=None, limit=100):
        """``[(zoid, module, name)]`` of the objects whose state holds
        ``value`` (a JSON scalar: text, number, boolean, None) at
        ``path`` (keys, outermost first), of class ``cls`` (``(module,
        name)``) when given; at most ``limit``, in zoid order."""
        p = self.PARAM
        where, params = self._at(path, value)
        if cls is not None:
            where += f' AND class_module = {p} AND class_name = {p}'
            params += list(cls)
        cursor.execute(
            f'SELECT zoid, class_module, class_name FROM object_json '
            f'WHERE {where} ORDER BY zoid LIMIT {p}', params + [limit])
        return [tuple(row) for row in cursor.fetchall()]

    def _at(self, path, value):
        """SQLite: the condition that the value at ``path`` is ``value``,
        and its parameters."""
        if value is None:
            return (f"json_type(state, {self.PARAM}) = 'null'",
                    [json_path(path)])
        if isinstance(value, bool):
            value = int(value)      # json_extract gives 1 and 0
        return (f'json_extract(state, {self.PARAM}) = {self.PARAM}',
                [json_path(path), value])

    def referring(self, cursor, oid, limit=100):
        """``[(zoid, module, name)]`` of the objects whose state refers
        to ``oid`` (a ``{"!ref": oid}`` anywhere in it), in zoid order."""
        p = self.PARAM
        cursor.execute(
            f'SELECT zoid, class_module, class_name FROM object_json j '
            f"WHERE EXISTS (SELECT 1 FROM json_tree(j.state) t "
            f"WHERE t.key = '!ref' AND t.value = {p}) "
            f'ORDER BY zoid LIMIT {p}', (oid, limit))
        return [tuple(row) for row in cursor.fetchall()]


def rows_array(rows):
    """``rows`` (``(zoid, module, name, JSON text or None)``, or ``(zoid,
    tid, module, name, JSON text or None)``) as the text of one JSON array
    of ``[zoid, module, name, state]`` (or ``[zoid, tid, ...]``): the
    states are JSON already, put in as they are."""
    dumps = json.dumps
    return '[' + ','.join([
        f'[{",".join(str(int(n)) for n in numbers)},{dumps(module)},'
        f'{dumps(name)},{state or "null"}]'
        for *numbers, module, name, state in rows]) + ']'


def json_path(keys):
    """``$."a"."b"``: a JSON path of object keys (SQLite, MySQL)."""
    return '$' + ''.join('.' + json.dumps(str(key)) for key in keys)
