"""group backoff: a subscription group's own backoff for released messages ("" = the broker's)

Revision ID: 7c4d2e91a5b3
Revises: 7d2c5e1f0a86
Create Date: 2026-11-28 14:40:00.000000
"""

from __future__ import annotations

from collections.abc import Sequence

import sqlalchemy as sa
from alembic import op

revision: str = '7c4d2e91a5b3'
down_revision: str | None = '7d2c5e1f0a86'
branch_labels: str | Sequence[str] | None = None
depends_on: str | Sequence[str] | None = None


def upgrade() -> None:
    with op.batch_alter_table('subscription_group') as batch:
        batch.add_column(sa.Column('backoff', sa.String(length=64), server_default='',
                                   nullable=False))


def downgrade() -> None:
    with op.batch_alter_table('subscription_group') as batch:
        batch.drop_column('backoff')
