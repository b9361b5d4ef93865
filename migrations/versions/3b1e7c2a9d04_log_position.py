"""log position: how far into the commit log's metadata records the tables are applied

Revision ID: 3b1e7c2a9d04
Revises: f80ccc51dad8
Create Date: 2026-11-28 03:00:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '3b1e7c2a9d04'
down_revision: str | None = 'f80ccc51dad8'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    op.create_table('log_position',
    sa.Column('queue_offset', sa.BigInteger(), nullable=False),
    sa.Column('commit_log_offset', sa.BigInteger(), nullable=False),
    sa.Column('updated_at_ms', sa.BigInteger(), nullable=False),
    sa.Column('name', sa.String(length=64), nullable=False),
    sa.PrimaryKeyConstraint('name', name=op.f('pk_log_position'))
    )


def downgrade() -> None:
    op.drop_table('log_position')
