"""Child-process programs for tests/test_blobs.py (not a test module).

Run as ``python tests/blob_workers.py COMMAND CONFIG_FILE [ARGS...]``;
CONFIG_FILE holds the ZConfig text of a ``<relstorage>`` section with its
blob options.  Same protocol as tests/workers.py: JSON lines with an
``event`` key on stdout, plain words from the parent on stdin.

Commands:

``write CONFIG NAME COUNT SIZE``
    Says ``ready``, waits for ``go``, then commits COUNT blobs of SIZE bytes
    under ``root['blobs'][(NAME, i)]`` (an OOBTree the parent made), each
    with content that ``content(NAME, i, SIZE)`` gives, retrying on
    conflicts.  After each commit it reads every blob it can see (its own
    and other writers') and checks its content.  Ends with a ``result``
    event: ``written``, ``checked`` (reads that matched) and ``wrong``
    (reads that did not, as ``[name, i]`` pairs).

``hold CONFIG NAME INDEX``
    Opens the blob ``root['blobs'][(NAME, INDEX)]`` for reading and says
    ``held`` with the name of the file it holds open; on ``release`` reads
    it to the end, checks the content and says ``read`` (``ok``).

``big CONFIG MEGABYTES OTHER_BLOB_DIR``
    Stores one blob of MEGABYTES MiB written in 1 MiB pieces (hashing them
    on the way), then opens the database again with OTHER_BLOB_DIR (an
    empty blob cache) as blob-dir, so that the blob comes from the
    database, reads it back and hashes it.  Says ``result`` with both
    hashes, the size read and the peak resident memory of the process
    (``maxrss_mb``).
"""
import hashlib
import os
import resource
import sys

from workers import emit
from workers import read_command
from workers import start_watchdog

#: Seconds after which a child exits, whatever it is doing.
MAX_LIFETIME = 300

#: Attempts of one transaction before the child gives up.
MAX_ATTEMPTS = 100


def content(name, index, size):
    """The bytes of blob ``(name, index)``: a header naming it, then a
    repeated pattern that differs for every blob."""
    head = f'{name}:{index}:'.encode()
    pattern = hashlib.sha256(head).digest() * 64
    body = (head + pattern * (size // len(pattern) + 1))[:size]
    return body


def config_text(config_path):
    with open(config_path, encoding='utf-8') as f:
        return f.read()


def open_db(text):
    import ZODB
    import ZODB.config
    return ZODB.DB(ZODB.config.storageFromString(text))


def run_write(config_path, name, count, size):
    import transaction
    from ZODB.blob import Blob
    from ZODB.POSException import ConflictError
    count, size = int(count), int(size)
    db = open_db(config_text(config_path))
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(transaction_manager=tm)
    emit('ready')
    if read_command() != 'go':
        raise SystemExit('expected go')
    written = checked = 0
    wrong = []
    for index in range(count):
        for _attempt in range(MAX_ATTEMPTS):
            try:
                tm.begin()
                blob = Blob(content(name, index, size))
                conn.root()['blobs'][(name, index)] = blob
                tm.commit()
                break
            except ConflictError:
                tm.abort()
        else:
            raise SystemExit(f'{name}: {MAX_ATTEMPTS} conflicts in a row')
        written += 1
        tm.begin()
        for (other, other_index), blob in conn.root()['blobs'].items():
            with blob.open('r') as f:
                data = f.read()
            if data == content(other, other_index, size):
                checked += 1
            else:
                wrong.append([other, other_index])
        tm.abort()
    conn.close()
    db.close()
    emit('result', written=written, checked=checked, wrong=wrong)


def run_hold(config_path, name, index):
    import transaction
    db = open_db(config_text(config_path))
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(transaction_manager=tm)
    tm.begin()
    blob = conn.root()['blobs'][(name, int(index))]
    f = blob.open('r')
    emit('held', path=f.name)
    if read_command() != 'release':
        raise SystemExit('expected release')
    data = f.read()
    f.close()
    tm.abort()
    conn.close()
    db.close()
    emit('read', ok=data == content(name, int(index), len(data)),
         size=len(data))


def run_big(config_path, megabytes, other_blob_dir):
    import transaction
    from ZODB.blob import Blob
    megabytes = int(megabytes)
    text = config_text(config_path)
    db = open_db(text)
    tm = transaction.TransactionManager(explicit=True)
    conn = db.open(transaction_manager=tm)
    tm.begin()
    blob = Blob()
    written = hashlib.sha256()
    piece = os.urandom(1 << 20)
    with blob.open('w') as f:
        for number in range(megabytes):
            # Every MiB differs (its number in front) yet costs no
            # random-number generation.
            data = number.to_bytes(8, 'big') + piece[8:]
            written.update(data)
            f.write(data)
    conn.root()['big'] = blob
    tm.commit()
    conn.close()
    db.close()
    emit('stored', maxrss_mb=maxrss_mb())
    # The same database through an empty cache: the blob is downloaded.
    blob_dir = next(line.split(None, 1)[1].strip()
                    for line in text.splitlines()
                    if line.strip().startswith('blob-dir '))
    db = open_db(text.replace(blob_dir, other_blob_dir))
    conn = db.open(transaction_manager=tm)
    tm.begin()
    read = hashlib.sha256()
    size = 0
    with conn.root()['big'].open('r') as f:
        while True:
            data = f.read(1 << 20)
            if not data:
                break
            read.update(data)
            size += len(data)
    tm.abort()
    conn.close()
    db.close()
    emit('result', written=written.hexdigest(), read=read.hexdigest(),
         size=size, maxrss_mb=maxrss_mb())


def maxrss_mb():
    """Peak resident memory of this process in MiB.

    Linux's ``VmHWM`` (the high-water mark of this process's own memory
    map, begun afresh at exec), not ``getrusage``'s ``ru_maxrss``: that one
    survives fork and exec, so a child of a test runner that has grown to
    200 MB reported 200 MB whatever it did itself (seen in full suite
    runs, the same figure on every backend).
    """
    try:
        with open('/proc/self/status', encoding='ascii') as f:
            for line in f:
                if line.startswith('VmHWM:'):
                    return int(line.split()[1]) / 1024
    except OSError:
        pass
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024


COMMANDS = {'write': run_write, 'hold': run_hold, 'big': run_big}


def main(argv):
    start_watchdog(MAX_LIFETIME)
    command = COMMANDS[argv[0]]
    command(*argv[1:])


if __name__ == '__main__':
    main(sys.argv[1:])
