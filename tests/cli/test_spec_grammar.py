"""The spec grammar reads back what it is given, and refuses the rest with one clear line."""

from __future__ import annotations

import re

import pytest
from hypothesis import assume, given
from hypothesis import strategies as st

from dsim import spec_grammar as g
from dsim.errors import InputError

KEYS = st.from_regex(r"[a-z][a-z_]{0,8}", fullmatch=True)
VALUES = st.from_regex(r"[A-Za-z0-9_.:/+-]{1,12}", fullmatch=True)
NUMBERS = st.floats(min_value=0, max_value=1e9, allow_nan=False, allow_infinity=False)


@given(st.dictionaries(KEYS, VALUES, max_size=6))
def test_key_values_round_trip(pairs):
    text = ",".join(f"{k}={v}" for k, v in pairs.items())
    assert g.key_values(text, "spec") == pairs


@given(st.dictionaries(KEYS, VALUES, min_size=1, max_size=4), KEYS)
def test_key_values_refuses_a_part_without_equals_naming_it(pairs, bare):
    text = ",".join([*(f"{k}={v}" for k, v in pairs.items()), bare])
    with pytest.raises(InputError, match=f"^where: expected NAME=V, got '{bare}'$"):
        g.key_values(text, "where", "NAME=V")


@given(st.dictionaries(KEYS, VALUES, min_size=1, max_size=4), st.data())
def test_key_values_refuses_a_key_given_twice(pairs, data):
    """`lag=1,lag=2`: which one was meant is not for dsim to guess (it used to keep the last)."""
    key = data.draw(st.sampled_from(sorted(pairs)))
    text = ",".join([*(f"{k}={v}" for k, v in pairs.items()), f"{key}=again"])
    with pytest.raises(InputError, match=f"^where: {key} given twice; give it once$"):
        g.key_values(text, "where")


@given(st.lists(st.integers(0, 10**12), min_size=1, max_size=8))
def test_ints_round_trip_and_keep_order(values):
    assert g.ints(",".join(map(str, values)), "--x", minimum=0) == tuple(values)


@given(st.lists(st.integers(1, 100), max_size=4), st.integers(-100, 0))
def test_ints_refuse_a_value_below_the_minimum(values, low):
    with pytest.raises(InputError, match=f"--x: '{low}' is not a positive integer"):
        g.ints(",".join(map(str, [*values, low])), "--x")


@given(st.integers(1, 10**6), st.integers(1, 10**6))
def test_pair_round_trip(p, d):
    assert g.pair(f"{p}:{d}", "--disagg") == (p, d)


@pytest.mark.parametrize(
    ("text", "problem"),
    [("2", "expected P:D"), ("1:2:3", "expected P:D"), ("a:b", "expected P:D")]
    + [("0:1", "at least 1 prefill"), ("3:0", "at least 1 prefill")],
)
def test_pair_refuses(text, problem):
    with pytest.raises(InputError, match=f"--disagg '{text}': .*{problem}"):
        g.pair(text, "--disagg")


@given(NUMBERS, st.one_of(st.none(), st.floats(1e-3, 1e6)))
def test_window_round_trip(lo, width):
    hi = None if width is None else lo + width
    if hi is not None and hi <= lo:  # rounding ate the width
        return
    text = f"{lo!r}:" + ("" if hi is None else repr(hi))
    assert g.window(text) == (lo, hi)


BRACKETED = st.builds(
    lambda a, opts: f"{a}[{','.join(opts)}]" if opts else a,
    VALUES,
    st.lists(st.builds("{}={}".format, KEYS, VALUES), max_size=3),
)


@given(st.lists(BRACKETED, min_size=1, max_size=5))
def test_split_top_keeps_commas_inside_brackets(entries):
    assert g.split_top(",".join(entries)) == entries


@given(
    st.lists(
        st.tuples(st.floats(0, 1), st.floats(1e-3, 1e3), st.sampled_from(["", "[rho=0.5]"])),
        min_size=1,
        max_size=4,
        unique_by=lambda e: (e[0], e[2]),  # a domain given twice is refused (test below)
    )
)
def test_acceptance_mix_round_trip(entries):
    text = "mix:" + ",".join(f"iid:{a!r}{o}={w!r}" for a, w, o in entries)
    parts = g.acceptance(text)
    assert [(p.kind, float(p.rest), p.weight) for p in parts] == [
        ("iid", a, w) for a, w, _ in entries
    ]
    assert [p.options for p in parts] == [o[1:-1] or None for _, _, o in entries]


def test_acceptance_is_none_for_a_file_and_reads_one_domain():
    assert g.acceptance("traces/acceptance/x.parquet") is None
    (part,) = g.acceptance("preset:dspark:chat:qwen3-4b[spread=1]")
    assert (part.kind, part.rest, part.options, part.weight) == (
        "preset",
        "dspark:chat:qwen3-4b",
        "spread=1",
        1.0,
    )


@given(st.sampled_from(["auto", "auto:0", "auto:2.5", "0", "1e-4"]))
def test_sched_cost_reads_its_three_forms(text):
    read = g.sched_cost(text)
    if text.startswith("auto"):
        assert read.factor == (float(text[5:]) if ":" in text else 1.0)
    else:
        assert (read.factor, read.seconds) == (None, float(text))


@pytest.mark.parametrize("text", ["fast", "auto:-1", "auto:nan", "nan", "inf", "-1", "auto:x"])
def test_sched_cost_refuses(text):
    with pytest.raises(InputError, match=f"--sched-cost '{text}': expected auto"):
        g.sched_cost(text)


@given(st.floats(0, g.MAX_DRAFT_RATIO))
def test_draft_cost_ratio_round_trip(x):
    assert g.draft_cost(f"ratio:{x!r}") == g.DraftCostSpec(ratio=x)
    with pytest.raises(InputError, match="ratio must be a finite number >= 0 and <= 100"):
        g.draft_cost(f"ratio:{g.MAX_DRAFT_RATIO + 1 + x!r}")
    assert g.draft_cost("0") == g.DraftCostSpec()
    assert g.draft_cost("profiles/d.csv") == g.DraftCostSpec(profile="profiles/d.csv")


def test_synthetic_reads_the_given_keys_and_refuses_unknown_ones():
    assert g.synthetic("synthetic:rate=2,n=5", ("rate", "cv", "n")) == {"rate": "2", "n": "5"}
    with pytest.raises(InputError, match=r"unknown key\(s\) \['zap'\]"):
        g.synthetic("synthetic:zap=1", ("rate",))


def test_is_synthetic_needs_the_word_alone_or_its_colon():
    """A file named `synthetic_traffic.csv` was once replaced by a generated trace unsaid."""
    assert g.is_synthetic("synthetic") and g.is_synthetic("synthetic:rate=2")
    for path in ("synthetic_traffic.csv", "synthetic.csv", "synthetics:rate=2", "a/synthetic"):
        assert not g.is_synthetic(path)


def test_with_rate_refuses_a_file_named_like_a_spec():
    with pytest.raises(InputError, match=r"--trace 'synthetic_x.csv' is a file"):
        g.with_rate("synthetic_x.csv", 2.0)


def test_acceptance_mix_refuses_a_domain_given_twice():
    with pytest.raises(InputError, match=r"iid:0.7 given twice; give it once, with its whole"):
        g.acceptance("mix:iid:0.7=1,iid:0.6=2, iid:0.7=3")


@given(st.integers(1, 64), st.floats(0, 1, exclude_min=True))
def test_tau_round_trip(drafts, share):
    tau = 1 + share * drafts
    assume(tau > 1)
    (part,) = g.acceptance(f"tau:{tau!r}@{drafts}[spread=1]")
    assert (part.kind, part.options) == ("tau", "spread=1")
    assert g.tau(part, 64) == g.TauSpec(tau, drafts)


@pytest.mark.parametrize(
    ("text", "problem"),
    [
        ("tau:1@4", "T must exceed 1, got 1: T counts the bonus token"),
        ("tau:0.5@4", "T must exceed 1, got 0.5"),
        ("tau:5.01@4", r"T must be at most K \+ 1 = 5 \(every draft accepted\), got 5.01"),
        ("tau:2@0", "K must be an integer >= 1 and <= 64, got 0"),
        ("tau:2@65", "K must be an integer >= 1 and <= 64, got 65"),
        ("tau:x@4", "T must be a number, got 'x'"),
        ("tau:inf@4", "T must be a finite number, got inf"),
        ("tau:2.8", r"no @K; expected tau:T@K \(T tokens per verify round, bonus included"),
        ("tau:2.8@", "K must be an integer, got ''"),
        ("tau:2.8@4@5", "K must be an integer, got '4@5'"),
        ("tau:2.8@2.5", "K must be an integer, got '2.5'"),
    ],
)
def test_tau_refuses_naming_the_spec_and_the_problem(text, problem):
    (part,) = g.acceptance(text)
    with pytest.raises(InputError, match=f"^acceptance '{re.escape(text)}': {problem}"):
        g.tau(part, 64)


def test_preset_reads_its_names_and_refuses_another_shape():
    (part,) = g.acceptance("preset:dspark:chat[noise=1]")
    assert g.preset(part) == ("dspark", "chat", None)
    (part,) = g.acceptance("preset:eagle3:code:qwen3-4b")
    assert g.preset(part) == ("eagle3", "code", "qwen3-4b")
    for text in ("preset:dspark", "preset:dspark:", "preset::chat", "preset:a:b:c:d"):
        (part,) = g.acceptance(text)
        with pytest.raises(InputError, match=r"expected preset:DRAFTER:DOMAIN\[:TARGET\]$"):
            g.preset(part)
