"""snapshot position: where the last whole metadata snapshot the tables applied lies in the log

Revision ID: 7d2c5e1f0a86
Revises: 3b1e7c2a9d04
Create Date: 2026-11-28 14:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '7d2c5e1f0a86'
down_revision: str | None = '3b1e7c2a9d04'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    # Nullable, no default: a row written by an older build says nothing of its snapshot,
    # and the broker then finds it by reading its log (store/system_feed.py).
    with op.batch_alter_table('log_position') as batch:
        batch.add_column(sa.Column('snapshot_queue_offset', sa.BigInteger(), nullable=True))
        batch.add_column(sa.Column('snapshot_commit_log_offset', sa.BigInteger(),
                                   nullable=True))
        batch.add_column(sa.Column('snapshot_parts', sa.Integer(), nullable=True))


def downgrade() -> None:
    with op.batch_alter_table('log_position') as batch:
        batch.drop_column('snapshot_parts')
        batch.drop_column('snapshot_commit_log_offset')
        batch.drop_column('snapshot_queue_offset')
