"""The MSCCL file model: parsing with line numbers, writing in the runtimes' layout, round trips."""

from __future__ import annotations

import pytest
from msccl_files import allgather2, broadcast3

from forestcoll.msccl.ir import MscclError, parse_algo, write_algo
from forestcoll.msccl.semantics import buffer_sizes


def test_round_trip_is_stable():
    algo = parse_algo(broadcast3())
    text = write_algo(algo)
    again = parse_algo(text)
    assert write_algo(again) == text
    assert again.coll == "broadcast" and again.ngpus == 3
    assert [len(g.tbs) for g in again.gpus] == [1, 2, 1]
    assert again.gpus[1].tbs[1].steps[0].depid == 0


def test_writer_keeps_parser_rules():
    algo = parse_algo(allgather2())
    algo.comments = ["made by a test"]
    text = write_algo(algo)
    assert not text.startswith("<?xml")
    assert "\t" not in text
    lines = text.splitlines()
    assert lines[0] == "<!-- made by a test -->"
    assert lines[1].startswith("<algo ")
    for line in lines:  # every element's attributes on its own line, in double quotes
        assert "'" not in line
        assert line.count("<") <= 1


def test_extra_attributes_survive():
    text = allgather2().replace('maxBytes="0"', 'maxBytes="0" maxcount="1" nthreadblocks="2"')
    algo = parse_algo(text)
    assert algo.extra == {"maxcount": "1", "nthreadblocks": "2"}
    assert 'nthreadblocks="2"' in write_algo(algo)


@pytest.mark.parametrize(
    ("mutate", "message"),
    [
        (lambda t: t.replace("</algo>", ""), "malformed XML"),
        (lambda t: t.replace(' cnt="1"', "", 1), "missing attribute 'cnt'"),
        (lambda t: t.replace('ngpus="2"', 'ngpus="two"'), "ngpus='two' is not an integer"),
        (lambda t: t.replace("<algo", "<algorithm").replace("</algo>", "</algorithm>"), "must be <algo>"),
        (lambda t: "<!DOCTYPE x>" + t, "DOCTYPE"),
        (lambda t: t.replace("<tb id=\"0\"", "<block id=\"0\"", 1).replace("</tb>", "</block>", 1), "may only contain <tb>"),
    ],
)
def test_malformed_files_name_the_problem(mutate, message):
    with pytest.raises(MscclError, match=message):
        parse_algo(mutate(allgather2()), "bad.xml")


def test_errors_carry_line_numbers():
    text = allgather2().replace(' cnt="1"', "", 1)
    with pytest.raises(MscclError, match=r"bad.xml:4: <step>"):
        parse_algo(text, "bad.xml")


def test_buffer_sizes_follow_the_collective():
    algo = parse_algo(allgather2())
    assert buffer_sizes(algo) == (1, 2)
    algo.coll = "reducescatter"
    assert buffer_sizes(algo) == (2, 1)
    algo.coll = "allreduce"
    assert buffer_sizes(algo) == (2, 2)
