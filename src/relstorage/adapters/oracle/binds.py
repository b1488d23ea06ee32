"""Bind variables for Oracle statements: named (``:oid``), the style both
drivers and Oracle's SQL parser share.  Parameters still travel as
sequences, bound by position; no statement repeats a name, so position
and name never disagree."""

#: Oracle refuses more than 1000 expressions in one IN list.
IN_LIMIT = 1000


def in_binds(values, prefix='v'):
    """``(the text inside IN (...), its parameters)``: one named bind per
    value (``:v0, :v1, ...``).  At most IN_LIMIT values."""
    values = list(values)
    if len(values) > IN_LIMIT:
        raise ValueError(f'{len(values)} values in one IN list; Oracle '
                         f'takes at most {IN_LIMIT}')
    return ', '.join(f':{prefix}{i}' for i in range(len(values))), values
