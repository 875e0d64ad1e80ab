"""fileio.dump_json's layout against its plain definition (the quadratic one it replaced), on random JSON values."""

from __future__ import annotations

import json

from hypothesis import given, settings
from hypothesis import strategies as st

from forestcoll.fileio import dump_json


def _one_line(obj) -> str:
    return json.dumps(obj, ensure_ascii=False, separators=(", ", ": "))


def _plain(obj, indent: str = "") -> str:
    """The definition: a container whose one-line form fits in 110 - indent characters (or a list of non-containers)
    is written on one line, the rest indented one space a level."""
    if not isinstance(obj, (dict, list)) or not obj:
        return _one_line(obj)
    if isinstance(obj, list) and all(not isinstance(x, (dict, list)) for x in obj):
        return _one_line(obj)
    if len(_one_line(obj)) <= 110 - len(indent):
        return _one_line(obj)
    inner = indent + " "
    if isinstance(obj, dict):
        items = [f"{inner}{json.dumps(k, ensure_ascii=False)}: {_plain(v, inner)}" for k, v in obj.items()]
        return "{\n" + ",\n".join(items) + "\n" + indent + "}"
    return "[\n" + ",\n".join(inner + _plain(v, inner) for v in obj) + "\n" + indent + "]"


SCALARS = st.one_of(st.none(), st.booleans(), st.integers(), st.floats(allow_nan=False), st.text(max_size=40),
                    st.tuples(st.integers(), st.text(max_size=3)))
VALUES = st.recursive(SCALARS, lambda inner: st.one_of(
    st.lists(inner, max_size=8), st.dictionaries(st.text(max_size=12), inner, max_size=8)), max_leaves=60)


@settings(max_examples=300, deadline=None)
@given(VALUES)
def test_dump_json_is_its_plain_definition(value):
    text = dump_json(value)
    assert text == _plain(value) + "\n"
    assert json.loads(text) == json.loads(_one_line(value))


def test_long_lists_of_names_stay_on_one_line_and_deep_edges_fit():
    data = {"ranks": [f"n{i}" for i in range(60)], "trees": [{"edges": [{"src": "a", "dst": "b", "path": ["a", "b"]}]}]}
    lines = dump_json(data).splitlines()
    assert lines[1].startswith(' "ranks": ["n0", ') and lines[1].endswith('"n59"],')
    assert '{"edges": [{"src": "a", "dst": "b", "path": ["a", "b"]}]}' in dump_json(data)


@settings(max_examples=200, deadline=None)
@given(st.lists(st.dictionaries(st.text(max_size=6), st.one_of(SCALARS, st.lists(st.text(max_size=30), max_size=5)),
                                max_size=4), min_size=1, max_size=4),
       st.lists(st.tuples(st.integers(0, 3), st.integers(0, 3)), max_size=12))
def test_shared_dict_objects_are_laid_out_as_copies_would_be(pool, picks):
    # one dict object in several places, at different depths (the shared tree edges of write_schedule): laid out
    # once per depth from a memo, the text must be that of distinct copies
    shared = [[pool[i % len(pool)] for i, _ in picks], {"deep": [[pool[j % len(pool)]] for _, j in picks]}]
    copies = json.loads(json.dumps(shared))
    assert dump_json(shared) == dump_json(copies) == _plain(copies) + "\n"
