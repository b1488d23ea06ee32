"""One step of the Plone benchmark, inside a Plone venv.

    python -I plone_workload.py STEP --instance DIR --expect-under PATH
                                [--patch-mariadb] --out FILE [options]

Run by plone.py with the interpreter of ``benchmarks/.venv-plone-ours`` or
``benchmarks/.venv-plone-rs43``, one process per step, so every step starts
with empty caches (ZODB's, the storage's) as a restarted instance would.
``DIR`` holds ``etc/zope.conf`` and ``etc/site.zcml``; Zope is started
from them as a WSGI instance, and only the step itself is timed, never
the start-up.  Steps: ``probe`` (versions only, no Zope), ``site``,
``content``, ``search``, ``render``, ``edit``, ``pack`` and ``verify``.
Each writes a JSON document to ``--out``; a failed check raises, so the
process exits non-zero with the traceback on stderr.
"""
import argparse
import hashlib
import html
import io
import json
import random
import sys
import time
from pathlib import Path

HERE = Path(__file__).resolve().parent
SITE_ID = 'Plone'
FOLDER_ID = 'bench'
ADMIN = ('admin', 'bench-admin-password')
#: Items are spread over sections (folders in the benchmark folder), as a
#: site's content is: a page in section ``i // PAGES_PER_SECTION``, an image
#: in section ``k // IMAGES_PER_SECTION``.  In one folder of 600 items,
#: the navigation portlet's listing of them took 80 % of a page's
#: rendering (400 ms a page; profiled), which no storage changes.
PAGES_PER_SECTION = 50
IMAGES_PER_SECTION = 10
#: The word every tenth page carries, found by the SearchableText query.
MARKER = 'quetzal'
#: What an edited page's title starts with.
EDITED = 'Edited'
WORDS = ('storage', 'relational', 'database', 'object', 'transaction',
         'persistent', 'catalog', 'index', 'content', 'workflow', 'page',
         'folder', 'image', 'editor', 'publish', 'review', 'portal',
         'python', 'server', 'request', 'response', 'template', 'render',
         'cache', 'commit', 'history', 'blob', 'query', 'search', 'title',
         'summary', 'section', 'news', 'event', 'member', 'group', 'role',
         'permission', 'site', 'theme', 'layout', 'viewlet', 'portlet',
         'navigation', 'breadcrumb', 'language', 'translation', 'archive')


# -- what the steps create: deterministic from the seed ----------------------

def page_id(i):
    return f'page-{i:04d}'


def image_id(k):
    return f'image-{k:03d}'


def section_id(n, kind):
    per = PAGES_PER_SECTION if kind == 'page' else IMAGES_PER_SECTION
    return f'section-{n // per:02d}'


def item_path(n, kind):
    """The path of page or image ``n`` below the site."""
    name = page_id(n) if kind == 'page' else image_id(n)
    return f'{FOLDER_ID}/{section_id(n, kind)}/{name}'


def item(portal, n, kind):
    return portal.unrestrictedTraverse(item_path(n, kind))


def page_title(i, seed):
    rnd = random.Random(seed * 7919 + i)
    return f'Page {i} on {rnd.choice(WORDS)} and {rnd.choice(WORDS)}'


def page_html(i, seed, edited=False):
    """1-6 paragraphs of 40-120 words (about 0.3-5 KB of HTML)."""
    rnd = random.Random(seed * 104729 + i + (1 << 20 if edited else 0))
    paragraphs = []
    for p in range(rnd.randint(1, 6)):
        words = [rnd.choice(WORDS) for _ in range(rnd.randint(40, 120))]
        if p == 0 and i % 10 == 0:
            words.insert(rnd.randint(0, len(words)), MARKER)
        paragraphs.append('<p>' + ' '.join(words).capitalize() + '.</p>')
    if edited:
        paragraphs.insert(0, f'<p>Revised text of page {i}.</p>')
    return '\n'.join(paragraphs)


#: (width, height) of the images, in turn: from thumbnails to photographs.
IMAGE_SIZES = ((160, 120), (480, 320), (800, 600), (1280, 960),
               (320, 240), (1600, 1200), (640, 480))


def image_bytes(k, seed):
    """A real PNG (even ``k``) or JPEG (odd ``k``): coloured rectangles
    over a gradient, and a band of noise so that the sizes vary (a few KB
    to a few MB)."""
    from PIL import Image, ImageDraw
    rnd = random.Random(seed * 15485863 + k)
    width, height = IMAGE_SIZES[k % len(IMAGE_SIZES)]
    img = Image.linear_gradient('L').resize((width, height)).convert('RGB')
    draw = ImageDraw.Draw(img)
    for _ in range(rnd.randint(3, 12)):
        x0, y0 = rnd.randrange(width), rnd.randrange(height)
        x1, y1 = rnd.randrange(x0, width + 1), rnd.randrange(y0, height + 1)
        draw.rectangle((x0, y0, x1, y1), fill=tuple(
            rnd.randrange(256) for _ in range(3)))
    band = max(1, height * rnd.randint(0, 40) // 100)
    noise = Image.frombytes('RGB', (width, band), rnd.randbytes(
        width * band * 3))
    img.paste(noise, (0, rnd.randrange(height - band + 1)))
    out = io.BytesIO()
    if k % 2 == 0:
        img.save(out, 'PNG')
    else:
        img.save(out, 'JPEG', quality=85)
    return out.getvalue()


def image_name(k):
    return f'{image_id(k)}.{"png" if k % 2 == 0 else "jpg"}'


def batches(pages, images):
    """The commits of the content step, in order: ('page', [i, ...]) of 1,
    2 or 3 pages, and after every fifth page an ('image', [k]), as editors
    adding items through the web would make them."""
    out, i, k, sizes, turn = [], 0, 0, (1, 2, 3, 1, 2), 0
    next_image = 5
    while i < pages or k < images:
        if i < pages and (k >= images or i < next_image):
            size = min(sizes[turn % len(sizes)], pages - i)
            turn += 1
            out.append(('page', list(range(i, i + size))))
            i += size
        else:
            out.append(('image', [k]))
            k += 1
            next_image = i + 5
    return out


# -- Zope ----------------------------------------------------------------------

class Instance:
    """A Zope started from ``DIR/etc/zope.conf``: the WSGI application,
    and a root ``app`` with a request, as a script run with ``zconsole``
    would have, logged in as the benchmark's Manager."""

    def __init__(self, directory, user=True):
        from Zope2.Startup.run import make_wsgi_app
        conf = Path(directory) / 'etc' / 'zope.conf'
        self.wsgi = make_wsgi_app({}, str(conf))
        import Zope2
        from Testing.makerequest import makerequest
        self.Zope2 = Zope2
        self.app = makerequest(Zope2.app())
        from zope.globalrequest import setRequest
        setRequest(self.app.REQUEST)
        if user:
            self.login()

    def login(self):
        from AccessControl.SecurityManagement import newSecurityManager
        acl = self.app.acl_users
        user = acl.getUser(ADMIN[0])
        if user is None:
            raise RuntimeError('the benchmark user is missing: the site '
                               'step did not run on this storage')
        newSecurityManager(None, user.__of__(acl))

    @property
    def portal(self):
        from zope.component.hooks import setSite
        portal = self.app[SITE_ID]
        setSite(portal)
        return portal

    def close(self):
        import transaction
        transaction.abort()
        if self.app._p_jar.opened:
            self.app._p_jar.close()
        self.Zope2.DB.close()


def commit(note):
    import transaction
    txn = transaction.get()
    txn.setUser(ADMIN[0])
    txn.note(note)
    txn.commit()


# -- the steps -----------------------------------------------------------------

def step_site(instance, args):
    """Create the Plone site (classic UI) with plone.distribution's API, as
    the @@plone-addsite form does; add the benchmark's Manager first (not
    timed)."""
    from plone.distribution.api import site as site_api
    app = instance.app
    app.acl_users._doAddUser(ADMIN[0], ADMIN[1], ['Manager'], [])
    commit('benchmark user')
    instance.login()
    answers = {'site_id': SITE_ID, 'title': 'Benchmark site',
               'description': 'A Plone site for benchmarks',
               'default_language': 'en', 'portal_timezone': 'UTC',
               'setup_content': True}
    started = time.perf_counter()
    site = site_api.create(app, 'classic', answers)
    seconds = time.perf_counter() - started
    if site.getId() != SITE_ID or SITE_ID not in app.objectIds():
        raise RuntimeError('the Plone site was not created')
    return {'seconds': seconds, 'distribution': 'classic'}


def step_content(instance, args):
    """``--pages`` pages and ``--images`` images in sections of a folder
    (each section created with its first item), through
    plone.api, one to three items per commit; pages are published (so
    that anonymous visitors see them).  The images are made before the
    clock starts."""
    from plone import api
    from plone.app.textfield.value import RichTextValue
    from plone.namedfile.file import NamedBlobImage
    portal = instance.portal
    images = {k: image_bytes(k, args.seed) for k in range(args.images)}
    plan = batches(args.pages, args.images)
    started = time.perf_counter()
    folder = api.content.create(container=portal, type='Folder',
                                id=FOLDER_ID, title='Benchmark content')
    api.content.transition(obj=folder, transition='publish')
    commit('benchmark folder')
    commits = 1
    for kind, numbers in plan:
        for n in numbers:
            section = section_id(n, kind)
            if section not in folder:
                api.content.transition(obj=api.content.create(
                    container=folder, type='Folder', id=section,
                    title=f'Section {section[8:]}'), transition='publish')
            if kind == 'page':
                page = api.content.create(
                    container=folder[section], type='Document',
                    id=page_id(n),
                    title=page_title(n, args.seed),
                    description=f'Summary of page {n}',
                    text=RichTextValue(page_html(n, args.seed), 'text/html',
                                       'text/x-html-safe'))
                api.content.transition(obj=page, transition='publish')
            else:
                api.content.create(
                    container=folder[section], type='Image', id=image_id(n),
                    title=f'Image {n}',
                    image=NamedBlobImage(data=images[n],
                                         filename=image_name(n)))
        commit(f'added {kind}s {numbers}')
        commits += 1
    seconds = time.perf_counter() - started
    return {'seconds': seconds, 'commits': commits,
            'image_bytes': sum(len(b) for b in images.values())}


def queries(args):
    """(name, catalog query, expected count) of the search step."""
    path = f'/{SITE_ID}/{FOLDER_ID}'
    return (
        ('pages in the folder', {'portal_type': 'Document', 'path': path},
         args.pages),
        ('images in the folder', {'portal_type': 'Image', 'path': path},
         args.images),
        ('SearchableText', {'SearchableText': MARKER},
         len(range(0, args.pages, 10))),
        ('section listing, depth 1',
         {'path': {'query': f'{path}/section-00', 'depth': 1},
          'sort_on': 'getObjPositionInParent'},
         min(args.pages, PAGES_PER_SECTION)
         + min(args.images, IMAGES_PER_SECTION)),
        ('20 newest pages', {'portal_type': 'Document', 'path': path,
                             'sort_on': 'created', 'sort_order': 'reverse',
                             'sort_limit': 20},
         min(20, args.pages)),
    )


def run_queries(catalog, args):
    """Every query once, its brains' metadata read as a listing would
    (title, URL, type); returns the counts and the seconds."""
    counts = {}
    started = time.perf_counter()
    for name, query, _expected in queries(args):
        brains = catalog.searchResults(**query)
        if 'sort_limit' in query:
            brains = brains[:query['sort_limit']]
        shown = [(b.Title, b.getURL(), b.portal_type) for b in brains[:50]]
        counts[name] = len(brains)
        del shown
    return counts, time.perf_counter() - started


def step_search(instance, args):
    """The catalog queries of ``queries()``, cold (first in this process)
    and warm (again); the counts must be those expected."""
    catalog = instance.portal.portal_catalog
    cold_counts, cold = run_queries(catalog, args)
    warm_counts, warm = run_queries(catalog, args)
    for name, _, expected in queries(args):
        if cold_counts[name] != expected or (
                warm_counts[name] != cold_counts[name]):
            raise RuntimeError(f'query {name!r}: {cold_counts[name]} then '
                               f'{warm_counts[name]} results, expected '
                               f'{expected}')
    return {'seconds': cold, 'warm_seconds': warm, 'counts': cold_counts}


def render_pass(port, numbers, seed):
    """GET each page as a browser would; returns the seconds of each."""
    import urllib.request
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    times = []
    for n in numbers:
        url = f'http://127.0.0.1:{port}/{SITE_ID}/{item_path(n, "page")}'
        request = urllib.request.Request(url, headers={
            'Accept': 'text/html', 'Accept-Language': 'en',
            'User-Agent': 'plone-benchmark'})
        started = time.perf_counter()
        with opener.open(request, timeout=120) as response:
            body = response.read()
            status = response.status
        times.append(time.perf_counter() - started)
        text = body.decode('utf-8')
        title = html.escape(page_title(n, seed), quote=False)
        if status != 200 or f'<title>{title}' not in text:
            raise RuntimeError(f'{url}: status {status}, title {title!r} '
                               f'not in the page ({len(body)} bytes)')
    return times


def step_render(instance, args):
    """``--render`` pages through Zope's publisher behind waitress on
    127.0.0.1, anonymously: cold (the first requests of this process, every
    cache empty), then warm (the same pages again)."""
    import statistics
    import threading
    import waitress
    instance.app._p_jar.close()     # the requests open their own
    app = instance.wsgi
    if instance.profiler is not None:
        # The requests run in waitress's thread, where cProfile must be
        # switched on (Zope's publisher returns the whole body).
        def app(environ, start_response, wsgi=instance.wsgi,
                profiler=instance.profiler):
            profiler.enable()
            try:
                return wsgi(environ, start_response)
            finally:
                profiler.disable()
    server = waitress.create_server(app, host='127.0.0.1', port=0,
                                    threads=1)
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    numbers = list(range(min(args.render, args.pages)))
    try:
        cold = render_pass(server.effective_port, numbers, args.seed)
        warm = render_pass(server.effective_port, numbers, args.seed)
    finally:
        server.close()
    return {'seconds': sum(cold), 'warm_seconds': sum(warm),
            'pages': len(numbers),
            'cold_median_ms': statistics.median(cold) * 1000,
            'warm_median_ms': statistics.median(warm) * 1000,
            'cold_first_ms': cold[0] * 1000}


def edited_numbers(args):
    """The pages the edit step changes: ``--edits`` of them, spread over
    the folder."""
    count = min(args.edits, args.pages)
    return sorted({(j * args.pages) // count for j in range(count)})


def step_edit(instance, args):
    """Change the title and text of ``--edits`` pages, one commit each,
    with the modified event the edit form sends (reindexing, versioning)."""
    from plone.app.textfield.value import RichTextValue
    from zope.lifecycleevent import modified
    portal = instance.portal
    numbers = edited_numbers(args)
    started = time.perf_counter()
    for n in numbers:
        page = item(portal, n, 'page')
        page.title = f'{EDITED} {page_title(n, args.seed)}'
        page.text = RichTextValue(page_html(n, args.seed, edited=True),
                                  'text/html', 'text/x-html-safe')
        modified(page)
        page.reindexObject()
        commit(f'edited {page_id(n)}')
    return {'seconds': time.perf_counter() - started, 'edits': len(numbers)}


def step_pack(instance, args):
    """The storage's pack through ZODB's ``DB.pack(days=0)``: old
    revisions (history-preserving) and unreachable objects go."""
    db = instance.Zope2.DB
    instance.app._p_jar.close()
    started = time.perf_counter()
    db.pack(days=0)
    return {'seconds': time.perf_counter() - started}


def step_verify(instance, args):
    """What the run made, read back (not timed): the catalog's counts,
    the folder's items by traversal, every edited page, and images' bytes
    against those made (every image with ``--all-images``, else five)."""
    portal = instance.portal
    catalog = portal.portal_catalog
    folder = portal[FOLDER_ID]
    path = f'/{SITE_ID}/{FOLDER_ID}'
    problems = []
    by_type = {}
    for section in folder.objectValues():
        for obj in section.objectValues():
            by_type[obj.portal_type] = by_type.get(obj.portal_type, 0) + 1
    if by_type.get('Document', 0) != args.pages or by_type.get(
            'Image', 0) != args.images:
        problems.append(f'traversal found {by_type}')
    for type_, want in (('Document', args.pages), ('Image', args.images)):
        got = len(catalog.searchResults(portal_type=type_, path=path))
        if got != want:
            problems.append(f'catalog: {got} {type_}, expected {want}')
    edited = set(edited_numbers(args)) if args.after_edit else set()
    for n in range(args.pages):
        page = item(portal, n, 'page')
        want = page_title(n, args.seed)
        if n in edited:
            want = f'{EDITED} {want}'
        if page.title != want or page.text.raw != page_html(
                n, args.seed, edited=n in edited):
            problems.append(f'{page_id(n)}: title {page.title!r}, '
                            f'expected {want!r}, or its text differs')
            break
    if edited:
        got = len(catalog.searchResults(Title=EDITED, path=path))
        if got != len(edited):
            problems.append(f'catalog: {got} edited titles, expected '
                            f'{len(edited)}')
    sample = range(args.images) if args.all_images else sorted(
        {0, 1, args.images // 2, args.images - 2, args.images - 1})
    digests = {}
    for k in sample:
        if not 0 <= k < args.images:
            continue
        field = item(portal, k, 'image').image
        with field.open() as f:
            got = f.read()
        want = image_bytes(k, args.seed)
        if got != want or field.getSize() != len(want):
            problems.append(f'{image_id(k)}: {len(got)} bytes read back, '
                            f'{len(want)} stored, or they differ')
        digests[image_id(k)] = hashlib.sha256(got).hexdigest()[:16]
    if problems:
        raise RuntimeError('verification failed: ' + '; '.join(problems))
    return {'seconds': 0.0, 'by_type': by_type, 'images_checked': digests}


STEPS = {'site': step_site, 'content': step_content, 'search': step_search,
         'render': step_render, 'edit': step_edit, 'pack': step_pack,
         'verify': step_verify}


def probe():
    """The versions of what this venv runs, and where relstorage is."""
    import platform
    import sqlite3
    from importlib import metadata
    info = {'python': platform.python_version(),
            'executable': sys.executable, 'sqlite': sqlite3.sqlite_version}
    for name in ('Plone', 'Products.CMFPlone', 'Zope', 'plone.api',
                 'plone.distribution', 'plone.classicui', 'ZODB',
                 'persistent', 'BTrees', 'transaction', 'relstorage',
                 'psycopg2-binary', 'mysqlclient', 'waitress', 'Pillow'):
        try:
            info[name] = metadata.version(name)
        except metadata.PackageNotFoundError:
            info[name] = None
    try:
        import relstorage
        info['relstorage_file'] = relstorage.__file__
    except ImportError:
        info['relstorage_file'] = None
    info['installed'] = sorted(
        f'{d.metadata["Name"]}=={d.version}' for d in metadata.distributions())
    return info


def check_relstorage(expect_under):
    """Refuse to run with another relstorage than the one expected."""
    import relstorage
    where = Path(relstorage.__file__).resolve()
    if not where.is_relative_to(Path(expect_under).resolve()):
        raise SystemExit(f'relstorage comes from {where}, not from under '
                         f'{expect_under}')
    return str(where)


def load_sibling(name):
    """A module of this directory, without putting the directory on
    ``sys.path`` (where plone.py would hide the ``plone`` package)."""
    import importlib.util
    spec = importlib.util.spec_from_file_location(name, HERE / f'{name}.py')
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


class StorageTimes:
    """Wall time spent inside the storage's methods during a step, per
    method: what the step's time owes to the storage (and, beside it,
    what it owes to the application).  The methods are wrapped on the
    classes of the storage ZODB opened (and of the instances it hands each
    Connection), so every connection's calls count; a call made inside
    another timed call is counted once, in the outer one."""

    METHODS = ('load', 'loadBefore', 'loadSerial', 'prefetch', 'store',
               'storeBlob', 'new_oid', 'tpc_begin', 'tpc_vote', 'tpc_finish',
               'tpc_abort', 'poll_invalidations', 'sync', 'afterCompletion',
               'loadBlob', 'openCommittedBlobFile', 'pack')

    def __init__(self, instance):
        import threading
        self.totals = {}
        self._lock = threading.Lock()
        self._local = threading.local()     # calls under way, per thread
        storage = instance.Zope2.DB.storage
        classes = {type(storage)}
        if hasattr(storage, 'new_instance'):
            other = storage.new_instance()
            classes.add(type(other))
            other.release()
        else:
            # FileStorage: ZODB wraps it in an MVCC adapter per Connection.
            from ZODB import mvccadapter
            classes.add(mvccadapter.MVCCAdapterInstance)
        for cls in classes:
            for name in self.METHODS:
                if hasattr(cls, name):
                    setattr(cls, name, self._timed(name, getattr(cls, name)))
        # ZODB's MVCC adapter copies some of FileStorage's bound methods
        # (new_oid, tpc_vote...) onto each instance it makes: the one of
        # the connection already open kept the unwrapped ones.
        opened = instance.app._p_jar._storage
        for name in self.METHODS:
            if name in vars(opened):
                setattr(opened, name, self._timed(name, vars(opened)[name]))

    def _timed(self, name, method):
        local = self._local

        def timed(*args, **kwargs):
            if getattr(local, 'inside', False):
                return method(*args, **kwargs)
            local.inside = True
            started = time.perf_counter()
            try:
                return method(*args, **kwargs)
            finally:
                local.inside = False
                elapsed = time.perf_counter() - started
                with self._lock:
                    calls, seconds = self.totals.get(name, (0, 0.0))
                    self.totals[name] = (calls + 1, seconds + elapsed)
        return timed

    def taken(self):
        """``{method: [calls, seconds]}``, and ``total`` seconds."""
        out = {name: [calls, round(seconds, 6)]
               for name, (calls, seconds) in sorted(self.totals.items())}
        out['total'] = round(sum(s for _, s in self.totals.values()), 6)
        return out


class CollectorTimes:
    """The garbage collector's passes during a step and their wall time,
    per generation: a storage that leaves more container objects behind
    makes the application pay for it in full collections, which no
    storage method's time shows (and a collection that starts inside one
    is counted there too)."""

    def __init__(self):
        import gc
        self._gc = gc
        self._started = None
        self.totals = {}
        gc.callbacks.append(self._callback)

    def _callback(self, phase, info):
        if phase == 'start':
            self._started = time.perf_counter()
        elif self._started is not None:
            generation = f'gen{info["generation"]}'
            passes, seconds = self.totals.get(generation, (0, 0.0))
            self.totals[generation] = (
                passes + 1, seconds + time.perf_counter() - self._started)
            self._started = None

    def taken(self):
        """``{'genN': [passes, seconds]}``; stops counting."""
        self._gc.callbacks.remove(self._callback)
        return {name: [passes, round(seconds, 6)]
                for name, (passes, seconds) in sorted(self.totals.items())}


def main(argv=None):
    parser = argparse.ArgumentParser()
    parser.add_argument('step', choices=['probe'] + list(STEPS))
    parser.add_argument('--instance')
    parser.add_argument('--expect-under')
    parser.add_argument('--patch-mariadb', action='store_true')
    parser.add_argument('--pages', type=int, default=500)
    parser.add_argument('--images', type=int, default=100)
    parser.add_argument('--render', type=int, default=200)
    parser.add_argument('--edits', type=int, default=100)
    parser.add_argument('--seed', type=int, default=1)
    parser.add_argument('--after-edit', action='store_true')
    parser.add_argument('--all-images', action='store_true')
    parser.add_argument('--profile', metavar='FILE',
                        help="cProfile the step (its times are then not "
                        "comparable) and write pstats' data to FILE")
    parser.add_argument('--storage-times', action='store_true',
                        help='time the calls of the storage (store, vote, '
                        'finish, loads) within the step')
    parser.add_argument('--out', required=True)
    args = parser.parse_args(argv)
    if args.step == 'probe':
        result = probe()
    else:
        result = {}
        if args.expect_under:
            result['relstorage_file'] = check_relstorage(args.expect_under)
        if args.patch_mariadb:
            result['mariadb_patch'] = load_sibling('mariadb_patch').apply()
        started = time.perf_counter()
        instance = Instance(args.instance, user=args.step != 'site')
        result['startup_seconds'] = time.perf_counter() - started
        instance.profiler = None
        if args.profile:
            import cProfile
            instance.profiler = cProfile.Profile()
        times = StorageTimes(instance) if args.storage_times else None
        collector = CollectorTimes() if args.storage_times else None
        try:
            if instance.profiler is not None and args.step != 'render':
                instance.profiler.enable()
            result.update(STEPS[args.step](instance, args))
            if times is not None:
                result['storage_times'] = times.taken()
                result['collector_times'] = collector.taken()
        finally:
            if instance.profiler is not None:
                instance.profiler.disable()
                instance.profiler.dump_stats(args.profile)
                result['profile'] = args.profile
            instance.close()
    with open(args.out, 'w') as f:
        json.dump(result, f, indent=1)


if __name__ == '__main__':
    main()
