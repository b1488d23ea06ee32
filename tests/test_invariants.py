"""Invariants that concurrent processes must not be able to break.

The bank: a few accounts (``workers.Account``, no conflict resolution) and
several processes (tests/workers.py ``transfers``) moving money between
them as fast as they can, each logging every transfer in the transaction
that makes it.  Afterwards the parent checks, from what the database holds
and what the children report, that the run was serializable: money was
neither made nor lost, every committed transfer is in the logs exactly
once, and replaying the logged transfers in commit (tid) order reproduces
every balance each transfer read, including those of the accounts it only
read with ``readCurrent()``.

Nothing here depends on the backend: the same checks hold for every one.
"""
import os
import random
import time

import workers
from test_processes import START_TIMEOUT
from test_processes import connect

#: Processes moving money at the same time.
TELLERS = 4

#: Transfers each of them commits.
TRANSFERS = 150

#: The opening balances; few accounts make a hot workload.
OPENING = [20 + 3 * number for number in range(20)]

#: Seconds a teller sleeps between changing the accounts and committing.
PAUSE = 0.001

#: How the tellers start their transactions, in turn (see workers.py).
BEGIN = ('explicit', 'implicit')

#: Seconds the tellers may take, all together (a few on an idle machine;
#: a loaded one can take ten times as long).  Below workers.MAX_LIFETIME.
RESULT_TIMEOUT = 100

#: Failures described in an assertion message, at most.
SHOWN = 10


def _seed():
    """The seed of the tellers' choices: RELSTORAGE_TEST_SEED, to rerun a
    failure, or a new one, printed with the summary."""
    given = os.environ.get('RELSTORAGE_TEST_SEED')
    return int(given) if given else random.randrange(2 ** 32)


def _replay(opening, transfers):
    """Apply ``transfers`` (dicts in commit order) to ``opening``; return
    the balances reached and a description of every transfer that read a
    balance the transfers committed before it do not give, or moved an
    amount the rules do not allow."""
    balances = list(opening)
    wrong = []
    for t in transfers:
        problems = []
        if t['seen_source'] != balances[t['source']]:
            problems.append(f"read source {t['seen_source']}, "
                            f"replay has {balances[t['source']]}")
        if t['seen_target'] != balances[t['target']]:
            problems.append(f"read target {t['seen_target']}, "
                            f"replay has {balances[t['target']]}")
        if t['witness'] >= 0:
            if t['seen_witness'] != balances[t['witness']]:
                problems.append(
                    f"read witness {t['witness']} (readCurrent) as "
                    f"{t['seen_witness']}, replay has "
                    f"{balances[t['witness']]}")
            allowed = {workers.witnessed_amount(t['seen_source'],
                                                t['seen_witness'])}
        else:
            allowed = set(range(
                min(1, t['seen_source']),
                min(t['seen_source'], workers.MAX_AMOUNT) + 1))
        if t['amount'] not in allowed:
            problems.append(f"moved {t['amount']}, allowed {allowed}")
        balances[t['source']] -= t['amount']
        balances[t['target']] += t['amount']
        if balances[t['source']] < 0:
            problems.append(f"overdrew account {t['source']}")
        if problems:
            wrong.append(f'{t["teller"]}#{t["index"]} at tid {t["tid"]}: '
                         + '; '.join(problems))
    return balances, wrong


def _explain_torn(example, transfers):
    """A torn view (workers.py's example: balances, serials, the tid
    polled) set against the committed transfers (in tid order): for each
    account that disagrees with the state at the polled tid, what it
    showed and what it should have."""
    polled = example.get('polled')
    seen = [t for t in transfers if polled is None or t['tid'] <= polled]
    balances, _ = _replay(OPENING, seen)
    last = [0] * len(OPENING)
    for t in seen:
        last[t['source']] = last[t['target']] = t['tid']
    held = example.get('in_snapshot')
    odd = []
    for n in range(len(OPENING)):
        shown = example['balances'][str(n)]
        serial = example.get('serials', {}).get(str(n))
        if shown != balances[n] or (serial is not None and last[n]
                                    and serial != last[n]):
            in_snapshot = (f', the snapshot holds {held.get(str(n))}'
                           if isinstance(held, dict) else '')
            odd.append(f'account {n}: shown {shown} (serial {serial}), '
                       f'at the polled tid {balances[n]} (serial '
                       f'{last[n] or "opening"}){in_snapshot}')
    return (f'transaction {example["transaction"]}, sum {example["sum"]}, '
            f'polled {polled}, snapshot {example.get("snapshot")}'
            + (f' ({held})' if isinstance(held, str) else '') + ': '
            + ('; '.join(odd) or 'no account differs from the polled tid'))


def test_account_transfers(open_db, config_file, spawn,  # noqa: F811
                           keep_history):
    """TELLERS processes each commit TRANSFERS transfers between shared
    accounts, some of them decided on a balance read with readCurrent,
    retrying on conflicts (half with explicit transaction managers, half
    with classic ones that start a transaction when the previous one
    ends).  No process ever sees a torn state (balances not adding up),
    a view older than one it saw before, or a view missing its own
    transfers; no money is made or lost; every committed transfer is
    logged once; and the logged transfers replayed in tid order give every
    balance a transfer read and every final balance."""
    names = [f't{i}' for i in range(TELLERS)]
    total = sum(OPENING)
    seed = _seed()
    db = open_db()
    tm, conn = connect(db)
    with tm:
        workers.prepare_accounts(conn.root(), OPENING, names)
    accounts = conn.root()['accounts']
    oids = {number: accounts[number]._p_oid for number in accounts}
    opened_tid = int.from_bytes(accounts[0]._p_serial, 'big')
    conn.close()

    # Half of them begin every transaction explicitly, the others let
    # each transaction start when the previous one ends.
    children = [spawn(name, 'transfers', config_file, name, TRANSFERS,
                      total, seed, PAUSE, BEGIN[number % len(BEGIN)])
                for number, name in enumerate(names)]
    for child in children:
        ready = child.expect('ready', START_TIMEOUT)
        assert ready['accounts'] == len(OPENING), ready
        assert ready['opening_total'] == total, ready
    started = time.monotonic()
    for child in children:
        child.send('go')
    results = {child.label: child.expect('result', RESULT_TIMEOUT)
               for child in children}
    for child in children:
        child.wait()
    elapsed = time.monotonic() - started

    counts = {name: {k: v for k, v in r.items()
                     if k not in ('tids', 'torn_examples', 'event')}
              for name, r in results.items()}
    conflicts = sum(r['conflicts'] for r in results.values())
    read_conflicts = sum(r['read_conflicts'] for r in results.values())
    timeouts = sum(r['lock_timeouts'] for r in results.values())
    committed = sum(r['committed'] for r in results.values())
    print(f'\naccount transfers: {committed} transfers '
          f'({sum(r["witnessed"] for r in results.values())} witnessed), '
          f'{conflicts} conflicts ({read_conflicts} read-current), '
          f'{timeouts} lock timeouts, {elapsed:.1f}s, seed {seed}')
    context = f'seed {seed}, per teller: {counts}'

    # Torn views are reported after the money and the logs are checked,
    # explained by the logged transfers and with what the replay in tid
    # order found: a sound history tells a reader's fault from a
    # writer's.
    torn = {name: result for name, result in results.items()
            if result['torn']}
    for name, result in results.items():
        if name in torn:
            continue
        assert result['committed'] == TRANSFERS, (name, context)
        assert len(result['tids']) == TRANSFERS, (name, context)
        assert result['went_backwards'] == 0, (name, context)
        assert result['lost_own'] == 0, (name, context)
        # Every attempt (and every audit) checked its view.
        assert result['views'] == result['attempts'] + result['audits'], (
            name, context)
    # The run really was concurrent: transactions collided and retried,
    # some of them because an account read with readCurrent changed.
    assert conflicts > 0, f'no ConflictError was raised; {context}'
    assert read_conflicts > 0, f'no ReadConflictError was raised; {context}'

    # What the database holds, read through a new storage and Connection.
    check_db = open_db()
    tm, conn = connect(check_db)
    with tm:
        root = conn.root()
        final = [root['accounts'][n].balance for n in range(len(OPENING))]
        serials = [int.from_bytes(root['accounts'][n]._p_serial, 'big')
                   for n in range(len(OPENING))]
        logs = {name: dict(root['transfers'][name].items())
                for name in names}
    conn.close()

    assert sum(final) == total, f'money made or lost: {final}; {context}'
    transfers = []
    for name in names:
        log = logs[name]
        assert sorted(log) == list(range(TRANSFERS)), (
            f'{name} logged {len(log)} transfers, committed '
            f'{results[name]["committed"]}; {context}')
        for index, tid in enumerate(results[name]['tids']):
            (source, target, amount, witness, seen_source, seen_target,
             seen_witness) = log[index]
            transfers.append(dict(
                teller=name, index=index, tid=tid, source=source,
                target=target, amount=amount, witness=witness,
                seen_source=seen_source, seen_target=seen_target,
                seen_witness=seen_witness))

    # The balances follow from the logs, whatever the order: every
    # committed transfer is logged, and nothing else is.
    from_logs = list(OPENING)
    for t in transfers:
        from_logs[t['source']] -= t['amount']
        from_logs[t['target']] += t['amount']
    mismatched = {n: (final[n], from_logs[n])
                  for n in range(len(OPENING)) if final[n] != from_logs[n]}
    assert not mismatched, (
        f'balance != opening + incoming - outgoing for account: '
        f'(final, from logs) {mismatched}; {context}')

    # Every transfer has its own tid, after the accounts were opened.
    tids = [t['tid'] for t in transfers]
    assert len(set(tids)) == len(tids), f'tids reused; {context}'
    assert min(tids) > opened_tid, context

    # Serializability: replayed in tid order, each transfer read exactly
    # the balances the transfers before it left, readCurrent ones
    # included, and moved an amount the rules allow.
    transfers.sort(key=lambda t: t['tid'])
    replayed, wrong = _replay(OPENING, transfers)
    assert not torn, '\n'.join(
        [f'{name} saw {result["torn"]} torn states; the first '
         f'{len(result["torn_examples"])}:\n'
         + '\n'.join(_explain_torn(example, transfers)
                     for example in result['torn_examples'])
         for name, result in torn.items()]
        + [f'(the logged transfers replayed in tid order: {len(wrong)} '
           f'not serializable); {context}'])
    assert not wrong, (f'{len(wrong)} transfers not serializable in tid '
                       f'order, e.g.:\n' + '\n'.join(wrong[:SHOWN])
                       + f'\n{context}')
    assert replayed == final, context

    # Each account's serial is the tid of the last transfer touching it;
    # with history, its revisions are exactly those transfers (and the
    # opening).
    touching = {n: [opened_tid] for n in range(len(OPENING))}
    for t in transfers:
        touching[t['source']].append(t['tid'])
        touching[t['target']].append(t['tid'])
    for n in range(len(OPENING)):
        assert serials[n] == touching[n][-1], (n, context)
    if keep_history:
        storage = check_db.storage
        for n, oid in oids.items():
            revisions = storage.history(oid, size=TELLERS * TRANSFERS + 10)
            found = sorted(int.from_bytes(r['tid'], 'big')
                           for r in revisions)
            assert found == touching[n], (
                f'account {n}: revisions {len(found)}, transfers '
                f'{len(touching[n]) - 1}; {context}')
