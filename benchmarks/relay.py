"""A loopback TCP relay in front of a database server, counting round trips
and adding latency (see harness/relay.py).

    .venv/bin/python benchmarks/relay.py --target 127.0.0.1:5432 --port 6432 --rtt 0.5

Point a client at ``--port``; Ctrl-C prints what crossed the relay.
"""
import argparse
import json
import signal
import threading

from harness.relay import Relay


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
    args = parser.parse_args(argv)
    host, _, port = args.target.rpartition(':')
    relay = Relay((host or '127.0.0.1', int(port)), args.rtt, args.port)
    relay.start()
    print(f'relaying 127.0.0.1:{relay.port} to {args.target}, '
          f'+{args.rtt:g} ms per round trip; Ctrl-C to stop', flush=True)
    stop = threading.Event()
    signal.signal(signal.SIGINT, lambda *a: stop.set())
    signal.signal(signal.SIGTERM, lambda *a: stop.set())
    stop.wait()
    relay.stop()
    print(json.dumps(relay.snapshot().as_dict(), indent=1))


if __name__ == '__main__':
    main()
