"""Principals, session ACL checks and policy fingerprints."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from planner.acl import (
    Principal,
    can_read,
    can_read_toolresults,
    parse_principal,
    policy_fingerprint,
)
from planner.exceptions import QueryError


def test_parse_full_principal_in_any_order():
    principal = parse_principal(" scopes:toolresults/groups:eng,ops/user:alice@x.io/tenant:acme ")
    assert principal == Principal("acme", "alice@x.io", frozenset({"eng", "ops"}),
                                  frozenset({"toolresults"}))
    assert str(principal) == "tenant:acme/user:alice@x.io/groups:eng,ops/scopes:toolresults"
    assert parse_principal(str(principal)) == principal


def test_parse_minimal_principal_and_empty_lists():
    assert parse_principal("tenant:default/user:local") == Principal("default", "local")
    assert parse_principal("tenant:t/user:u/groups:/scopes:") == Principal("t", "u")
    assert parse_principal("tenant:t/user:oidc:42").user == "oidc:42"


@pytest.mark.parametrize("text, says", [
    ("", "empty"),
    ("   ", "empty"),
    ("tenant:acme", "user segment is missing"),
    ("user:alice", "tenant segment is missing"),
    ("tenant:acme/user:", "must be non-empty"),
    ("tenant:acme/user:al ice", "must be non-empty"),
    ("tenant:acme/user:alice/role:admin", "unknown segment 'role'"),
    ("tenant:acme/user:alice/user:bob", "appears twice"),
    ("tenant:acme/user:alice/alice", "is not name:value"),
    ("tenant:acme/user:alice/groups:eng,,ops", "comma list"),
    ("tenant:acme/user:alice/scopes:admin", "unknown scope(s) admin"),
    ("tenant:acme//user:alice", "is not name:value"),
])
def test_malformed_principal_is_a_clear_query_error(text, says):
    with pytest.raises(QueryError) as caught:
        parse_principal(text)
    assert says in caught.value.message
    assert caught.value.hint and "tenant:acme/user:alice" in caught.value.hint


ALICE = Principal("acme", "alice", frozenset({"eng"}), frozenset())


@pytest.mark.parametrize("acl, expected", [
    ({"tenant": "acme", "read": ["*"]}, True),
    ({"tenant": "acme", "read": ["user:alice"]}, True),
    ({"tenant": "acme", "read": ["group:eng"]}, True),
    ({"tenant": "acme", "read": ["user:bob", "group:ops"]}, False),
    ({"tenant": "acme", "read": []}, False),
    ({"tenant": "acme"}, False),  # no read list: nobody
    ({"tenant": "other", "read": ["*"]}, False),  # never across tenants
    ({"tenant": "other", "read": ["user:alice"]}, False),
    ({"read": ["*"]}, False),
    ({"tenant": "acme", "read": "*"}, False),  # malformed: fail closed
    ({"tenant": "acme", "read": [None, 3, "user:alicex", "group:", "eng"]}, False),
    (None, False),
])
def test_can_read_truth_table(acl, expected):
    assert can_read(ALICE, acl) is expected


def test_full_tool_results_need_the_scope_and_the_acl():
    acl = {"tenant": "acme", "read": ["*"]}
    scoped = Principal("acme", "alice", frozenset(), frozenset({"toolresults"}))
    assert not can_read_toolresults(ALICE, acl)
    assert can_read_toolresults(scoped, acl)
    assert not can_read_toolresults(scoped, {"tenant": "acme", "read": ["user:bob"]})


names = st.text(alphabet="abcxyz019._-@:", min_size=1, max_size=6)


@given(names, names, st.sets(names, max_size=4), st.sets(st.just("toolresults")))
def test_fingerprint_is_stable_and_distinguishes_principals(tenant, user, groups, scopes):
    principal = Principal(tenant, user, frozenset(groups), frozenset(scopes))
    reparsed = parse_principal(str(principal))
    assert reparsed == principal
    assert policy_fingerprint(reparsed) == policy_fingerprint(principal)
    assert len(policy_fingerprint(principal)) == 32
    other = Principal(tenant, user + "x", frozenset(groups), frozenset(scopes))
    assert policy_fingerprint(other) != policy_fingerprint(principal)
    widened = Principal(tenant, user, frozenset(groups) | {"zz-new"}, frozenset(scopes))
    assert policy_fingerprint(widened) != policy_fingerprint(principal)
