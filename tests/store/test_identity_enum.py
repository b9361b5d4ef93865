"""The statuses every put looks up hash by identity, and still behave as enums."""

from __future__ import annotations

import pickle

import pytest

from ha.dledger.core.actions import AppendStatus
from store.identity_enum import IdentityEnum
from store.status import PutMessageStatus


@pytest.mark.parametrize("enum_type", [PutMessageStatus, AppendStatus])
def test_members_hash_by_identity_and_keep_enum_behaviour(enum_type: type[IdentityEnum]) -> None:
    """Hash is object's (not Enum's name hash in Python); lookup by value, pickling, set and
    dict membership are those of any Enum."""
    assert enum_type.__hash__ is object.__hash__
    for member in enum_type:
        assert hash(member) == object.__hash__(member)
        assert enum_type(member.value) is member
        assert pickle.loads(pickle.dumps(member)) is member
        assert {member: 1}[member] == 1 and member in frozenset(enum_type)
    assert len(set(enum_type)) == len(list(enum_type))
