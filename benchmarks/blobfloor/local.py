"""blob_floor.py without a server: SQLite's chunk table (stdlib sqlite3,
WAL, synchronous FULL), and a shared blob directory's plain file
operations (copy, copy and fsync, rename), for comparison.
"""
import os
import shutil
import sqlite3

from .runner import MiB, file_chunks, size_label


class SqliteBench:
    """The chunk table in a SQLite file of the run's directory."""

    def __init__(self, args, runner):
        self.args = args
        self.runner = runner

    def run(self):
        path = os.path.join(self.runner.workdir, 'blobfloor.sqlite3')
        conn = sqlite3.connect(path, isolation_level=None)  # explicit BEGIN/COMMIT
        try:
            conn.execute('PRAGMA journal_mode = WAL')
            conn.execute('PRAGMA synchronous = FULL')
            conn.execute("""
                CREATE TABLE blob_chunk (
                    blob_id INTEGER NOT NULL,
                    chunk_num INTEGER NOT NULL,
                    data BLOB NOT NULL,
                    PRIMARY KEY (blob_id, chunk_num))""")

            def write(blob_id, f, chunk_size):
                conn.execute('BEGIN')
                for num, data in enumerate(file_chunks(f, chunk_size)):
                    conn.execute('INSERT INTO blob_chunk (blob_id, chunk_num, data)'
                                 ' VALUES (?, ?, ?)', (blob_id, num, data))
                conn.execute('COMMIT')
                return blob_id

            def read(blob_id, out, size, chunk_size):
                for (data,) in conn.execute('SELECT data FROM blob_chunk WHERE blob_id = ?'
                                            ' ORDER BY chunk_num', (blob_id,)):
                    out.write(data)

            chunk = self.args.chunk_size
            label = size_label(chunk)
            key = ('sqlite', 'sqlite3', 'BLOB chunks')
            refs = self.runner.write(key + ('write', 'INSERT per chunk', label),
                                     write, chunk, read)
            self.runner.read(key + ('read', 'cursor over SELECT', label), read, chunk, refs)
            page_size = conn.execute('PRAGMA page_size').fetchone()[0]
        finally:
            conn.close()
        return ['SQLite %s: WAL, synchronous=FULL, page_size=%d, file in %s' % (
            sqlite3.sqlite_version, page_size, self.runner.workdir)]


class FilesBench:
    """A shared blob directory's file operations, on the run's directory's
    filesystem."""

    def __init__(self, args, runner):
        self.runner = runner

    def run(self):
        blobdir = os.path.join(self.runner.workdir, 'blobs')
        os.makedirs(blobdir, exist_ok=True)
        target = os.path.join(blobdir, 'blob')
        staged = os.path.join(blobdir, 'staged')
        key = ('files', 'os', 'shared directory', 'write')

        def copy(size, src):
            shutil.copyfile(src, target)

        def copy_fsync(size, src):
            shutil.copyfile(src, target)
            fd = os.open(target, os.O_RDONLY)
            try:
                os.fsync(fd)
            finally:
                os.close(fd)

        def clear(size, src):
            if os.path.exists(target):
                os.unlink(target)

        def stage(size, src):
            clear(size, src)
            shutil.copyfile(src, staged)

        def rename(size, src):
            os.rename(staged, target)

        # Targets never exist beforehand (like new blob files): ext4 flushes
        # a file renamed over an existing one (auto_da_alloc).
        self.runner.timed(key + ('shutil.copyfile', '-'), copy, prepare=clear)
        self.runner.timed(key + ('copyfile + fsync', '-'), copy_fsync, prepare=clear)
        rename_key = key + ('os.rename (same fs)', '-')
        self.runner.timed(rename_key, rename, prepare=stage)
        os.unlink(target)
        cells = self.runner.table.rows[rename_key]
        times = ', '.join('%s %.3f ms' % (size_label(size), size / MiB / rate * 1000)
                          for size, (rate, growth) in sorted(cells.items()))
        return ['files: %s (same filesystem as the sources); os.rename median: %s'
                % (blobdir, times)]


