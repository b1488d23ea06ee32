"""Plone-like content for benchmarks/mirror.py: the states a CMS stores,
made of the classes a real site pickles (persistent objects, BTrees,
datetimes), under names every process can import (this module)."""
import datetime
import random

from BTrees.IIBTree import IITreeSet
from BTrees.IOBTree import IOBucket
from BTrees.Length import Length
from BTrees.OOBTree import OOBTree
from persistent import Persistent
from persistent.mapping import PersistentMapping

WORDS = ('annual', 'report', 'minutes', 'draft', 'budget', 'review',
         'policy', 'meeting', 'notes', 'plan', 'summary', 'invoice',
         'letter', 'proposal', 'contract', 'agenda', 'press', 'release')


class RichText(Persistent):
    """A rich text field's value (plone.app.textfield keeps one)."""


class Document(Persistent):
    """A Dexterity item: its schema's fields, Dublin Core, workflow
    history, ownership and local roles as attributes."""


class Folder(Persistent):
    """A large folder (plone.folder's BTree folder): its items in an
    OOBTree, their count, their order."""


def words(rng, low, high):
    return ' '.join(rng.choices(WORDS, k=rng.randint(low, high)))


def document(rng, number, when):
    doc = Document()
    doc.id = f'document-{number}'
    doc.title = words(rng, 3, 8).capitalize()
    doc.description = words(rng, 10, 30)
    doc.text = text = RichText()
    text.raw = '<p>' + words(rng, 80, 300) + '</p>'
    text.mimeType, text.outputMimeType = 'text/html', 'text/x-html-safe'
    text.encoding = 'utf-8'
    doc.subject = tuple(rng.sample(WORDS, 3))
    doc.creators = ('admin',)
    doc.contributors = ()
    doc.language = 'en'
    doc.creation_date = when
    doc.modification_date = when
    doc.effective_date = None
    doc.expiration_date = None
    doc.exclude_from_nav = False
    doc.rights = ''
    doc.portal_type = 'Document'
    doc.workflow_history = PersistentMapping({
        'simple_publication_workflow': ({
            'action': None, 'actor': 'admin', 'comments': '',
            'review_state': 'private', 'time': when},)})
    doc._owner = (['acl_users'], 'admin')
    doc.__ac_local_roles__ = {'admin': ['Owner']}
    doc.uid = f'{rng.getrandbits(128):032x}'
    return doc


def catalog_bucket(rng, start):
    """A catalog's metadata bucket: record ids to brain tuples."""
    bucket = IOBucket()
    when = datetime.datetime(2026, 1, 1)
    for rid in range(start, start + 60):
        bucket[rid] = (words(rng, 3, 8), words(rng, 5, 15), 'Document',
                       'published', when, f'/site/folder/doc-{rid}', rid,
                       f'{rng.getrandbits(128):032x}', ('a', 'b'))
    return bucket


def index_tree(rng):
    """A catalog index: words to sets of record ids."""
    tree = OOBTree()
    for word in WORDS:
        tree[word] = IITreeSet(rng.sample(range(100000), 40))
    return tree


def folder(count):
    made = Folder()
    made._tree = OOBTree()
    made._count = Length(count)
    made._order = [f'document-{i}' for i in range(count)]
    return made


def seeded(seed):
    return random.Random(f'mirror:{seed}')
