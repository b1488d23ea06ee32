"""A loopback TCP relay in front of a database server, counting round trips
and adding latency (see harness/relay.py).

    .venv/bin/python benchmarks/relay.py --target 127.0.0.1:5432 --port 6432 --rtt 0.5

Point a client at ``--port``; Ctrl-C prints what crossed the relay.

With ``--control-port`` (0: a free port) the relay also answers every
connection to that port with its counts so far, one line of JSON, and
prints one line of JSON as soon as it listens: ``{"port": P, "control": C,
"target": "HOST:PORT", "rtt": MS}``.  With ``--stop-on-eof`` it stops when
its standard input is closed (what a benchmark does, and what happens when
the benchmark dies), then prints its counts.  This is how the benchmarks run
it (harness/roundtrips.py): a process of its own, so that its threads do
not compete with the workload for the GIL.
"""
import argparse
import json
import signal
import sys
import threading

from harness.relay import Control, Relay


def main(argv=None):
    parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
    parser.add_argument('--target', default='127.0.0.1:5432',
                        help='HOST:PORT of the server (default '
                        '127.0.0.1:5432)')
    parser.add_argument('--port', type=int, default=0,
                        help='the port to listen on, on 127.0.0.1 (default: '
                        'a free one, printed)')
    parser.add_argument('--rtt', type=float, default=0.0,
                        help='milliseconds added to every round trip '
                        '(half each way; default 0)')
    parser.add_argument('--control-port', type=int,
                        help='answer the counts (one line of JSON) on this '
                        'port of 127.0.0.1 (0: a free one); the ports are '
                        'printed as one line of JSON')
    parser.add_argument('--stop-on-eof', action='store_true',
                        help='stop when standard input is closed')
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(':')
    relay = Relay((host or '127.0.0.1', int(port)), args.rtt, args.port)
    relay.start()
    control = None
    if args.control_port is not None:
        control = Control(relay, args.control_port).start()
        print(json.dumps({'port': relay.port, 'control': control.port,
                          'target': args.target, 'rtt': args.rtt}),
              flush=True)
    else:
        print(f'relaying 127.0.0.1:{relay.port} to {args.target}, '
              f'+{args.rtt:g} ms per round trip; Ctrl-C to stop', flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    if args.stop_on_eof:
        def watch():
            sys.stdin.read()
            stop.set()
        threading.Thread(target=watch, daemon=True).start()
    stop.wait()
    if control:
        control.stop()
    relay.stop()
    print(json.dumps(relay.snapshot().as_dict(), indent=None if control
                     else 1), flush=True)


if __name__ == '__main__':
    main()
