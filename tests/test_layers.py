"""The architecture, checked: which part of relstorage may import which
(docs/architecture.rst draws it), no import circle, no module too long.

Every ``import`` of a relstorage module counts, at module level or inside
a function: a deferred import is still a dependency."""
import ast
import pathlib

import relstorage

SRC = pathlib.Path(relstorage.__file__).parent
#: What a module may grow to before it is split by role.
MAX_LINES = 800

#: The parts, lowest first, and what each may import besides itself.
#: ``base`` is what every part may use.
BASE = ('relstorage.errors', 'relstorage.tids', 'relstorage.metrics',
        'relstorage.progress', 'relstorage.config.options',
        'relstorage.config.replicas', 'relstorage.migrations',
        'relstorage.pickles', 'relstorage.classes')
PARTS = {
    'base': (),
    'relstorage.adapters': ('base',),
    'relstorage.blobs': ('base',),
    'relstorage.cache': ('base',),
    'relstorage.copy': ('base',),
    'relstorage.mirror': ('base',),
    'relstorage.pack': ('base', 'relstorage.adapters'),
    'relstorage.storage': ('base', 'relstorage.adapters', 'relstorage.blobs',
                           'relstorage.cache', 'relstorage.mirror',
                           'relstorage.pack'),
    'entry': ('base', 'relstorage.adapters', 'relstorage.blobs',
              'relstorage.cache', 'relstorage.copy', 'relstorage.mirror',
              'relstorage.pack', 'relstorage.storage', 'entry'),
}
#: The entry points: they build storages from text, a URI or a command
#: line, and nothing else imports them.
ENTRY = ('relstorage.config.zconfig', 'relstorage.config.uri',
         'relstorage.cli', 'relstorage')


def module_name(path):
    parts = list(path.relative_to(SRC.parent).with_suffix('').parts)
    if parts[-1] == '__init__':
        parts.pop()
    return '.'.join(parts)


def modules():
    return {module_name(p): p for p in sorted(SRC.rglob('*.py'))}


def part_of(name):
    if name in BASE:
        return 'base'
    for entry in ENTRY:
        if name == entry or (entry != 'relstorage'
                             and name.startswith(entry + '.')):
            return 'entry'
    for part in PARTS:
        if name == part or name.startswith(part + '.'):
            return part
    if name == 'relstorage.config':
        return 'base'       # its __init__ imports nothing
    raise AssertionError(f'{name} belongs to no part: add it to one')


def imports(name, path, known):
    """The relstorage modules ``name`` imports."""
    tree = ast.parse(path.read_text(encoding='utf-8'))
    package = name if path.name == '__init__.py' else name.rpartition('.')[0]
    found = set()
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ''
            if node.level:
                anchor = package.split('.')
                anchor = anchor[:len(anchor) - node.level + 1]
                base = '.'.join(anchor + ([base] if base else []))
            # ``from package import module`` imports the module.
            targets = [f'{base}.{alias.name}'
                       if f'{base}.{alias.name}' in known else base
                       for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in known:
                target = target.rpartition('.')[0]
            if target.startswith('relstorage') and target != name:
                found.add(target)
    return found


def graph():
    known = modules()
    # The schema's steps, installed as relstorage.migrations from the top
    # of the source tree (setup.py).
    names = set(known) | {'relstorage.migrations'}
    return {name: imports(name, path, names) for name, path in known.items()}


def test_every_part_imports_only_what_it_may():
    wrong = []
    for name, targets in sorted(graph().items()):
        part = part_of(name)
        allowed = set(PARTS[part]) | {part}
        for target in sorted(targets):
            if part_of(target) not in allowed:
                wrong.append(f'{name} ({part}) imports {target} '
                             f'({part_of(target)})')
    assert wrong == []


def test_no_import_circle():
    edges = graph()
    circles = []
    # Tarjan's strongly connected components.
    index, low, stack, on_stack, counter = {}, {}, [], set(), [0]

    def visit(node):
        index[node] = low[node] = counter[0]
        counter[0] += 1
        stack.append(node)
        on_stack.add(node)
        for target in sorted(edges.get(node, ())):
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in on_stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            component = []
            while True:
                member = stack.pop()
                on_stack.discard(member)
                component.append(member)
                if member == node:
                    break
            if len(component) > 1:
                circles.append(sorted(component))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    assert circles == []


def test_no_module_longer_than_the_limit():
    long = {name: n for name, path in modules().items()
            if (n := len(path.read_text(encoding='utf-8').splitlines()))
            > MAX_LINES}
    assert long == {}


def test_the_check_sees_the_imports():
    # The check would pass on a graph it failed to read: make sure it
    # read the edges it must have.
    edges = graph()
    assert 'relstorage.storage.commit' in edges['relstorage.storage.core']
    assert 'relstorage.adapters.pack' in edges['relstorage.pack.analysis']
    assert 'relstorage.errors' in edges['relstorage.config.replicas']
    assert part_of('relstorage.adapters.postgresql.drivers') == (
        'relstorage.adapters')
    assert part_of('relstorage.cli.zodbpack') == 'entry'
